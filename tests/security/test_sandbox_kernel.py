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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.deadlines import seconds
from worker import sandbox, sandbox_disk

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
        self.disk_limit: str | None = None  # how the last root-worker launch held its disk limit (its words)
        self.run_dir_mode = 0o755  # the run dir as the worker makes it (0700 under a worker whose umask is 077)

    def run(self, job_id: int, ask: dict[str, Any], **spec: Any) -> tuple[int, Path, str]:
        from core.settings import Settings

        settings = Settings(data_dir=self.data_dir, sandbox="on")
        run_dir = settings.resolved_runs_dir / f"job_{job_id}"
        run_dir.mkdir(parents=True, exist_ok=True)
        run_dir.chmod(self.run_dir_mode)
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
        # The attempt ends in the sandbox's own thread: its run dir's filesystem, if any, copied back and gone.
        assert sandbox_disk.wait_released(launched.mark, seconds(120)), "the attempt's filesystem is still mounted"
        self.disk_limit = launched.disk_limit
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
    # A root worker's job gets a filesystem of its disk limit's size where the host has loop devices: ENOSPC; a
    # non-root worker's, the sampled check with no file past twice the limit: EFBIG.
    on_filesystem = worker.root and all(sandbox_disk.host_can_mount())
    assert seen["fallocate"] == ("ENOSPC" if on_filesystem else "EFBIG"), "a 300 MB fallocate against a 50 MB limit"
    assert seen["write_root"] in REFUSED  # the sandbox's own root is read-only
    assert seen["own_run_dir"] == "done"  # what the job may write, it still can
    assert _host_values() == before, "a host sysctl changed during the job"
    if Path("/proc/keys").exists():
        assert key not in Path("/proc/keys").read_text()

    # The next job finds no key of the first one (and could not add one either).
    code, run_dir, log = worker.run(2, {"key": key})
    assert code == 0, log
    assert _report(run_dir)["find_key"] == "EPERM"


def test_filling_dev_shm_past_the_memory_limit_ends_in_the_jobs_own_limits(
    worker: Worker, served_api: Callable[..., Any]
) -> None:
    """The job meets its own limit; the API (a process of its own, as `rankzero api` serves it) and its database
    answer after it, as before it."""
    api = served_api()
    assert httpx.get(f"{api.base}/api/jobs", headers=api.auth, timeout=seconds(10)).status_code == 200
    code, run_dir, log = worker.run(3, {"key": "rz-shm", "shm_mb": 1200}, memory_limit_mb=768)
    assert (run_dir / "attack_rank0.json").exists(), log
    if (run_dir / "shm.txt").exists():  # not killed: the tmpfs, sized to the limit, refused the rest
        assert (run_dir / "shm.txt").read_text() == "ENOSPC", log
    else:  # killed by the OOM killer inside its own cgroup: torchrun reports the rank's death
        assert code != 0, log
    assert not Path("/dev/shm/fill").exists()  # the job's /dev/shm was its own
    assert api.proc.poll() is None, "the API died while the job filled /dev/shm"
    jobs = httpx.get(f"{api.base}/api/jobs", headers=api.auth, timeout=seconds(10))  # a database read
    assert jobs.status_code == 200, jobs.text
    assert httpx.get(f"{api.base}/api/health", timeout=seconds(10)).status_code == 200


def _mounts_under(folder: Path) -> list[str]:
    points = (line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines())
    return [p for p in points if p.startswith(str(folder))]


@pytest.fixture
def root_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    monkeypatch.setenv("RANKZERO_TRAINER_MODULE", "tests.security.sandbox_attacks")
    monkeypatch.delenv("RANKZERO_SANDBOX", raising=False)
    data_dir = Path(tempfile.mkdtemp(prefix="rz-disk-"))
    try:
        yield Worker(True, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.skipif(
    os.geteuid() != 0 or not all(sandbox_disk.host_can_mount()),
    reason="a filesystem per attempt needs a root worker and loop devices (elsewhere: the sampled check, tested below)",
)
def test_a_root_workers_job_meets_enospc_at_its_disk_limit_and_keeps_its_files(root_worker: Worker) -> None:
    """Issue 34: a 300 MB fallocate and 80 MB of small files against a 50 MB limit fail inside the job with ENOSPC;
    what an earlier attempt left (a checkpoint) is in the job's view, and what this one wrote outlives it."""
    run_dir = Path(root_worker.data_dir) / "runs" / "job_5"
    (run_dir / "checkpoints").mkdir(parents=True)
    earlier = os.urandom(300_000)
    (run_dir / "checkpoints" / "step_00000010.pt").write_bytes(earlier)

    # It resumes from that checkpoint, as a requeued attempt does (the path in its own run dir: once bound by a
    # descriptor opened on the run dir underneath its filesystem, which bwrap refused as a race).
    code, run_dir, log = root_worker.run(5, {"key": "rz-disk", "fallocate_mb": 300, "small_files_mb": 80,
                                              "keep_mb": 5}, disk_limit_mb=50,
                                         resume_from=str(run_dir / "checkpoints" / "step_00000010.pt"))  # fmt: skip
    assert code == 0, log
    seen = _report(run_dir)
    assert seen["fallocate"] == "ENOSPC" and seen["small_files"] == "ENOSPC", seen
    assert seen["checkpoints"] == ["step_00000010.pt"]  # the exact resume's checkpoint, in the job's view
    assert root_worker.disk_limit is not None and "enforced by a filesystem" in root_worker.disk_limit

    # After the attempt: its files in the run dir itself, the filesystem and its image gone.
    assert _mounts_under(root_worker.data_dir) == []
    assert list((run_dir.parent / sandbox_disk.DISKS_DIR).iterdir()) == []
    assert (run_dir / "kept.bin").stat().st_size == 5 * 2**20
    assert (run_dir / "checkpoints" / "step_00000010.pt").read_bytes() == earlier
    assert not (run_dir / "small").exists() and (run_dir / "mine.txt").read_text() == "x"  # removed by the job
    assert os.stat(run_dir).st_uid == os.stat(run_dir / "kept.bin").st_uid != 0  # the job's, as before


def test_where_no_filesystem_can_be_made_the_sampled_check_holds_and_says_so(
    root_worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host without loop devices (a container): the job runs, no file passes twice its limit (EFBIG), and the
    worker's words name the fallback and why."""
    monkeypatch.setattr(sandbox_disk, "host_can_mount", lambda: (False, True))
    code, run_dir, log = root_worker.run(6, {"key": "rz-disk", "fallocate_mb": 300}, disk_limit_mb=50)
    assert code == 0, log
    assert _report(run_dir)["fallocate"] == "EFBIG"
    assert root_worker.disk_limit is not None and "once per heartbeat" in root_worker.disk_limit
    assert "no loop devices" in root_worker.disk_limit
    assert _mounts_under(root_worker.data_dir) == []


def test_a_root_workers_job_enters_a_run_dir_closed_to_all_but_its_owner(root_worker: Worker) -> None:
    """bench/worker_cpu.py saw "bwrap: Can't chdir to the run dir: Permission denied": a worker whose umask is 077
    makes the run dir 0700, the sandbox gives it to the job's uid, and bwrap entered it as uid 0 without
    capabilities. The job's first process enters it now, as the job's uid."""
    root_worker.run_dir_mode = 0o700
    old = os.umask(0o077)
    try:
        code, run_dir, log = root_worker.run(7, {"key": "rz-chdir"})
    finally:
        os.umask(old)
    assert "Can't chdir" not in log
    assert code == 0, log
    seen = _report(run_dir)
    assert seen["cwd"] == str(run_dir) and seen["status"]["Uid"].split()[0] != "0"
