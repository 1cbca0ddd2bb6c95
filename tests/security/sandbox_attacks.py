"""Issue 34's attacks, as a job: run by torchrun in place of the trainer (RANKZERO_TRAINER_MODULE=
tests.security.sandbox_attacks). It reads `<run dir>/attack.json`, tries each attack on the kernel, writes what
happened to `<run dir>/attack_rank<R>.json` (an errno name, or "done" when the kernel let it through), and
then, when asked, fills /dev/shm past its memory limit.

attack.json: {"key": description of a key to add and look for, "fallocate_mb": size to fallocate in the
run dir, "shm_mb": MiB to write to /dev/shm after the report (or null), "small_files_mb": MiB to write in the run
dir as 64 KiB files (or null), "keep_mb": MiB to write to `kept.bin` in the run dir and leave there (or null)}
The report also lists the run dir's `checkpoints/` (what an earlier attempt left there, as the job sees it).

`python -m tests.security.sandbox_attacks launch DATA_DIR JOB_ID SPEC_JSON` is a worker of its own: it
launches one attempt as the supervisor does (worker/launch.py) and prints its exit code. The tests run it
as a non-root user, so the job is sandboxed as a non-root worker's is.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import sys
from pathlib import Path

KEY_SPEC_USER_KEYRING = -4
KEYCTL_SEARCH = 10
# x86_64 syscall numbers of what the seccomp filter refuses (the test runs where the project runs: x86_64).
SYSCALLS = {
    "io_uring_setup": 425,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "unshare": 272,
    "mount": 165,
    "setns": 308,
    "ptrace": 101,
    "kexec_load": 246,
    "open_tree": 428,
    "fsopen": 430,
}
SYSCTLS = {
    "/proc/sys/kernel/printk_ratelimit": "6",
    "/proc/sys/kernel/core_pattern": "|/tmp/owned %p",
    "/proc/sys/vm/drop_caches": "3",
}

_libc = ctypes.CDLL(None, use_errno=True)


def _errno_name(code: int) -> str:
    return errno.errorcode.get(code, str(code))


def _syscall(number: int, *args: object) -> str:
    ctypes.set_errno(0)
    result = _libc.syscall(number, *args)
    return "done" if result >= 0 else _errno_name(ctypes.get_errno())


def _write(path: str, value: str) -> str:
    try:
        with open(path, "w") as fh:
            fh.write(value)
        return "done"
    except OSError as exc:
        return _errno_name(exc.errno or 0)


def _fallocate(path: Path, mb: int) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, mb * 2**20)
        return "done"
    except OSError as exc:
        return _errno_name(exc.errno or 0)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def _small_files(folder: Path, mb: int) -> str:
    """Write `mb` MiB as 64 KiB files (each closed before the next): the errno that stopped it, or "done". They are
    removed after (the report is written next)."""
    folder.mkdir()
    block = b"\1" * 65536
    try:
        for i in range(mb * 16):
            with open(folder / f"f{i:06d}", "wb") as fh:
                fh.write(block)
        return "done"
    except OSError as exc:
        return _errno_name(exc.errno or 0)
    finally:
        shutil.rmtree(folder)


def _keep(path: Path, mb: int) -> str:
    with open(path, "wb") as fh:
        for _ in range(mb):
            fh.write(os.urandom(2**20))
    return "done"


def _status() -> dict[str, str]:
    fields = dict(line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line)
    return {k: fields.get(k, "").strip() for k in ("Uid", "Gid", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")}


def attack(ask: dict, run_dir: Path) -> dict[str, object]:
    key = ask["key"].encode()
    return {
        "status": _status(),
        "cwd": os.getcwd(),
        "sysctl": {path: _write(path, value) for path, value in SYSCTLS.items()},
        "sysrq": _write("/proc/sysrq-trigger", "h") if Path("/proc/sysrq-trigger").exists() else "ENOENT",
        "add_key": _syscall(248, b"user", key, b"a secret of one job", 19, KEY_SPEC_USER_KEYRING),
        "find_key": _syscall(250, KEYCTL_SEARCH, KEY_SPEC_USER_KEYRING, b"user", key, 0),
        "syscalls": {name: _syscall(number, 0, 0, 0, 0, 0) for name, number in SYSCALLS.items()},
        "kept": _keep(run_dir / "kept.bin", int(ask["keep_mb"])) if ask.get("keep_mb") else None,
        "fallocate": _fallocate(run_dir / "big.bin", int(ask.get("fallocate_mb", 0)))
        if ask.get("fallocate_mb")
        else None,
        "small_files": _small_files(run_dir / "small", int(ask["small_files_mb"]))
        if ask.get("small_files_mb")
        else None,
        "checkpoints": sorted(p.name for p in (run_dir / "checkpoints").iterdir()),
        "write_root": _write("/planted", "x"),
        "own_run_dir": _write(str(run_dir / "mine.txt"), "x"),
    }


def fill_shm(mb: int) -> str:
    """Write `mb` MiB to /dev/shm, a MiB at a time: ENOSPC at the tmpfs's size, or the OOM killer first."""
    block = b"\1" * 2**20
    try:
        with open("/dev/shm/fill", "wb") as fh:
            for _ in range(mb):
                fh.write(block)
                fh.flush()
        return "done"
    except OSError as exc:
        return _errno_name(exc.errno or 0)


def job() -> int:
    run_dir = Path(os.environ["RANKZERO_RUN_DIR"])
    rank = int(os.environ.get("RANK", "0"))
    ask = json.loads((run_dir / "attack.json").read_text())
    seen = attack(ask, run_dir)
    tmp = run_dir / f"attack_rank{rank}.json.tmp"
    tmp.write_text(json.dumps(seen))
    tmp.replace(run_dir / f"attack_rank{rank}.json")
    if ask.get("shm_mb"):
        outcome = fill_shm(int(ask["shm_mb"]))
        (run_dir / "shm.txt").write_text(outcome)  # reached only when the job was not killed
    return 0


def launch_as_worker(data_dir: str, job_id: str, spec_json: str) -> int:
    """One attempt launched as the supervisor does, by whichever user runs this; prints its exit code."""
    from core.settings import Settings
    from trainer.run_dir import RunDir
    from worker.launch import launch

    settings = Settings(data_dir=Path(data_dir), sandbox="on")
    run = RunDir(settings.resolved_runs_dir / f"job_{job_id}")
    spec = json.loads(spec_json)
    launched = launch(run, spec, int(job_id), 1, 1, None, settings)
    code = launched.proc.wait(timeout=300)
    print(json.dumps({"code": code, "log": launched.launcher_log.read_text()[-4000:]}))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["launch"]:
        sys.exit(launch_as_worker(*sys.argv[2:5]))
    sys.exit(job())
