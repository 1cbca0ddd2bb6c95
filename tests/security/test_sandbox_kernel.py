"""Issue 34: a job is never root on its host. Real launches (worker/launch.py, as the supervisor calls it) of a
job (tests/security/sandbox_attacks.py) that tries what the red team did to the kernel: sysctl writes
(printk_ratelimit, core_pattern, drop_caches), a key in the user keyring for the next job to read, io_uring,
bpf, perf_event_open and the mount and namespace calls, a fallocate past its disk limit, /dev/shm filled past
its memory limit. With a root worker (this test process) and a non-root one (the same launch run by a user
made for the test, `setpriv`): each is refused, and the host's values read here after the job are unchanged."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worker import sandbox

pytestmark = pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")

REPO = Path(__file__).resolve().parents[2]
WORKER_UID = 64123  # the non-root worker of these tests (no account: setpriv needs none)
REFUSED = {"EPERM", "EACCES", "EROFS", "ENOSPC", "EDQUOT", "EFBIG"}
HOST_SYSCTLS = ("/proc/sys/kernel/printk_ratelimit", "/proc/sys/kernel/core_pattern")


def _host_values() -> dict[str, str]:
    return {p: Path(p).read_text() for p in HOST_SYSCTLS}


def _open_path_cmd(argv: list[str], uid: int) -> list[str]:
    """`argv` as `uid`, in a mount namespace of its own where the interpreter's closed folder (/root, 0700, on
    a host whose Python lives in /root/.pyenv) is opened: a tmpfs over it shows only the interpreter's tree."""
    closed = next((p for p in reversed(Path(sys.executable).resolve().parents) if not os.stat(p).st_mode & 0o001), None)
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--"]
    if closed is None:
        return [*drop, *argv]
    child = closed / Path(sys.executable).resolve().relative_to(closed).parts[0]
    script = (
        'stash=$(mktemp -d) && mount --bind "$1" "$stash" && mount -t tmpfs -o mode=0755 rz-open "$2" '
        '&& mkdir -p "$1" && mount --move "$stash" "$1" && shift 2 && exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script, "sh", str(child), str(closed),
            *drop, *argv]  # fmt: skip


class Worker:
    """Launches one attempt of the attack job as a root worker (in this process) or a non-root one."""

    def __init__(self, root: bool, data_dir: Path) -> None:
        self.root, self.data_dir = root, data_dir

    def run(self, job_id: int, ask: dict[str, Any], **spec: Any) -> tuple[int, Path, str]:
        from core.settings import Settings

        settings = Settings(data_dir=self.data_dir, sandbox="on")
        run_dir = settings.resolved_runs_dir / f"job_{job_id}"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "attack.json").write_text(json.dumps(ask))
        full = {"name": "attack", **spec}
        if self.root:
            return self._run_here(settings, run_dir, job_id, full)
        return self._run_as_user(run_dir, job_id, full)

    def _run_here(self, settings: Any, run_dir: Path, job_id: int, spec: dict) -> tuple[int, Path, str]:
        from trainer.run_dir import RunDir
        from worker.launch import launch

        launched = launch(RunDir(run_dir), spec, job_id, 1, 1, None, settings)
        code = launched.proc.wait(timeout=300)
        return code, run_dir, launched.launcher_log.read_text()

    def _run_as_user(self, run_dir: Path, job_id: int, spec: dict) -> tuple[int, Path, str]:
        subprocess.run(["chown", "-R", f"{WORKER_UID}:{WORKER_UID}", str(self.data_dir)], check=True)
        argv = [sys.executable, "-m", "tests.security.sandbox_attacks", "launch", str(self.data_dir), str(job_id),
                json.dumps(spec)]  # fmt: skip
        env = {"PATH": os.environ["PATH"], "HOME": "/tmp", "RANKZERO_TRAINER_MODULE": "tests.security.sandbox_attacks"}
        done = subprocess.run(_open_path_cmd(argv, WORKER_UID), cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600, check=False)  # fmt: skip
        assert done.returncode == 0, f"the non-root worker failed: {done.stdout[-3000:]} {done.stderr[-3000:]}"
        said = json.loads(done.stdout.strip().splitlines()[-1])
        return said["code"], run_dir, said["log"]


@pytest.fixture(params=["root worker", "non-root worker"])
def worker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    monkeypatch.setenv("RANKZERO_TRAINER_MODULE", "tests.security.sandbox_attacks")
    monkeypatch.delenv("RANKZERO_SANDBOX", raising=False)
    # Outside pytest's tmp folders (0700, root's): a non-root worker must reach its data dir.
    data_dir = Path(tempfile.mkdtemp(prefix="rz-kernel-"))
    try:
        yield Worker(request.param == "root worker", data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "attack_rank0.json").read_text())


def test_a_job_cannot_change_the_kernel_or_leave_a_key(worker: Worker) -> None:
    before = _host_values()
    key = f"rz-{secrets.token_hex(6)}"
    code, run_dir, log = worker.run(1, {"key": key, "fallocate_mb": 300}, disk_limit_mb=50)
    assert code == 0, log
    seen = _report(run_dir)

    status = seen["status"]
    assert status["Seccomp"] == "2" and status["NoNewPrivs"] == "1", status
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0, status
    host_uid = status["Uid"].split()[0]
    assert host_uid != "0", f"the job ran as uid 0: {status}"  # in its own namespace too
    for path, outcome in seen["sysctl"].items():
        assert outcome in REFUSED, f"{path}: {outcome}"
    assert seen["sysrq"] in REFUSED | {"ENOENT"}
    assert seen["add_key"] == "EPERM" and seen["find_key"] == "EPERM", seen
    for name, outcome in seen["syscalls"].items():
        assert outcome == "EPERM", f"{name}: {outcome}"
    assert seen["fallocate"] in REFUSED, f"a 300 MB fallocate against a 50 MB disk limit: {seen['fallocate']}"
    assert seen["write_root"] in REFUSED  # the sandbox's own root is read-only
    assert seen["own_run_dir"] == "done"  # what the job may write, it still can
    assert _host_values() == before, "a host sysctl changed during the job"
    if Path("/proc/keys").exists():
        assert key not in Path("/proc/keys").read_text()

    # The next job finds no key of the first one (and could not add one either).
    code, run_dir, log = worker.run(2, {"key": key})
    assert code == 0, log
    assert _report(run_dir)["find_key"] == "EPERM"


def test_filling_dev_shm_past_the_memory_limit_ends_in_the_jobs_own_limits(worker: Worker) -> None:
    code, run_dir, log = worker.run(3, {"key": "rz-shm", "shm_mb": 1200}, memory_limit_mb=768)
    assert (run_dir / "attack_rank0.json").exists(), log
    if (run_dir / "shm.txt").exists():  # not killed: the tmpfs, sized to the limit, refused the rest
        assert (run_dir / "shm.txt").read_text() == "ENOSPC", log
    else:  # killed by the OOM killer inside its own cgroup: torchrun reports the rank's death
        assert code != 0, log
    assert not Path("/dev/shm/fill").exists()  # the job's /dev/shm was its own
