"""The path from claim to torchrun (issue 27 item 3, issue 29 "submit → first step"): the mechanisms that keep
a job's start as short as a bare torchrun's, not times (bench/startup_overhead.py measures those).

- torchrun's parent (worker/rank_guard.py, worker/sandbox_guard.py) starts without `site`: the .pth files of the
  environment (an editable install's finder) cost every job ~0.1 s and the guard needs none of it;
- a first attempt has no earlier one to stop: node 0 does not scan every process's environment for one;
- nothing on the launch path sleeps: a launch is as fast as the machine, never a poll period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from worker.launch_command import guard_command, rank_env


def _imported(stderr: str) -> set[str]:
    """The modules a process imported, from its PYTHONPROFILEIMPORTTIME lines."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("guard", ["worker.rank_guard", "worker.sandbox_guard"])
def test_the_guard_starts_without_site_and_runs_its_command(guard: str, tmp_path: Path) -> None:
    env = rank_env("startup-test", None)
    marker = tmp_path / "ran"
    child = ["/bin/sh", "-c", f"touch {marker}; exit 3"]  # not Python: the import lines are the guard's own
    read, write = os.pipe()
    try:
        fds = (read,) if guard == "worker.sandbox_guard" else ()
        head = [str(read)] if guard == "worker.sandbox_guard" else []
        cmd = guard_command(guard)  # isolated (-I): PYTHON* variables are not read, so -X importtime
        done = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:], *head, "5", *child], env=env, pass_fds=fds,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    finally:
        os.close(read)
        os.close(write)
    imported = _imported(done.stderr)
    assert {"worker", "subprocess"} <= imported, done.stderr  # its own package (run as __main__ by runpy)
    assert "site" not in imported, "the guard imported site (and the environment's .pth files)"
    assert not [m for m in imported if "editable" in m or m.startswith(("_distutils_hack", "sqlalchemy", "core"))]
    assert marker.exists() and done.returncode == 3  # it ran its command and exits as the command did


@pytest.mark.parametrize("guard", ["worker.rank_guard", "worker.sandbox_guard"])
def test_a_project_cannot_stand_in_for_the_guard(guard: str, tmp_path: Path) -> None:
    """A bundle with its own `worker/` package and a `subprocess.py`, first on PYTHONPATH and the working folder
    (as a script job's are): the guard still runs the service's own code, and the command runs."""
    project = tmp_path / "project"
    (project / "worker").mkdir(parents=True)
    taken = tmp_path / "taken"
    impostor = f"open({str(taken)!r}, 'w').write('imported'); raise SystemExit(9)\n"
    for name in ("__init__.py", "rank_guard.py", "sandbox_guard.py"):
        (project / "worker" / name).write_text(impostor)
    (project / "subprocess.py").write_text(impostor)
    env = rank_env("startup-test", None)
    env["PYTHONPATH"] = os.pathsep.join([str(project), env["PYTHONPATH"]])
    marker = tmp_path / "ran"
    read, write = os.pipe()
    try:
        fds = (read,) if guard == "worker.sandbox_guard" else ()
        head = [str(read)] if guard == "worker.sandbox_guard" else []
        child = ["/bin/sh", "-c", f"touch {marker}; exit 4"]
        done = subprocess.run([*guard_command(guard), *head, "5", *child], env=env, pass_fds=fds, cwd=project,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    finally:
        os.close(read)
        os.close(write)
    assert not taken.exists(), "the project's module ran in the guard's place"
    assert marker.exists() and done.returncode == 4, done.stderr


@pytest.mark.parametrize(("attempt", "scans"), [(1, False), (2, True), (5, True)])
def test_only_a_later_attempt_looks_for_processes_an_earlier_one_left(
    attempt: int, scans: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.settings import Settings
    from trainer.run_dir import RunDir
    from worker import node_zero, procs, run_record

    looked: list[int] = []

    def stop_earlier_attempts(run_root: Path, grace_s: float, keep_alive: Any = None, attempt: Any = None) -> list:
        looked.append(attempt)
        return []

    monkeypatch.setattr(procs, "stop_earlier_attempts", stop_earlier_attempts)
    monkeypatch.setattr(run_record, "catch_up", lambda *a, **k: 0)
    monkeypatch.setattr(run_record, "newest_intact_checkpoint", lambda *a, **k: None)
    settings = Settings(data_dir=tmp_path / "data")  # pyright: ignore[reportCallIssue]
    node_zero._before_launch(None, settings, 7, attempt, RunDir(tmp_path / "job_7"))  # type: ignore[arg-type]
    assert looked == ([attempt] if scans else [])


def test_nothing_on_the_launch_path_sleeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script job's launch, as node 0 makes it (bundle unpacked, working folder, sandbox where this host has
    one, torchrun started), with every sleep refused: the launch waits for nothing but the work itself."""
    from core import bundles as core_bundles
    from core.settings import Settings
    from trainer.run_dir import RunDir
    from worker import bundles, sandbox
    from worker.launch import launch

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('iter 0')\n")
    settings = Settings(data_dir=tmp_path / "data", sandbox="on" if sandbox.probe() is None else "off")  # pyright: ignore[reportCallIssue]
    settings.resolved_runs_dir.mkdir(parents=True)
    packed = core_bundles.pack(project, tmp_path / "b.tar.gz")
    store = core_bundles.archive_path(settings, packed.sha256)
    store.parent.mkdir(parents=True, exist_ok=True)
    os.replace(packed.archive, store)
    code = core_bundles.ref(packed.sha256)
    bundles.ensure(settings, code)  # the first unpack (a second submit of the same code finds it done)

    def refused(seconds: float) -> None:
        raise AssertionError(f"the launch path slept {seconds} s")

    monkeypatch.setattr(time, "sleep", refused)
    spec = {"name": "t", "code": code, "entrypoint": "train.py", "nproc": 1, "device": "cpu"}
    run = RunDir(settings.resolved_runs_dir / "job_1")
    code_dir = bundles.code_dir(spec, settings)
    launched = launch(run, spec, 1, 1, 1, None, settings, code_dir=code_dir)
    monkeypatch.undo()
    try:
        assert launched.proc.pid > 0
    finally:
        os.killpg(launched.proc.pid, signal.SIGKILL)  # the launch is the point, not the run (torch's import)
        launched.proc.wait(timeout=60)
        sandbox.end(launched.mark)


def test_the_guards_and_the_sdk_import_nothing_heavy() -> None:
    """`import rankzero` (a user's script) and the guards' modules add no second to a rank's start."""
    code = "import sys, rankzero, worker.sandbox_guard; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-S", "-c", code], env=rank_env("startup-test", None),
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    loaded = set(done.stdout.split())
    heavy = {"torch", "numpy", "sqlalchemy", "pydantic", "celery", "httpx", "core", "yaml"}
    assert not loaded & heavy, sorted(loaded & heavy)


def test_packing_code_imports_no_database_and_no_settings() -> None:
    """`rankzero submit --code` packs and uploads: it loads neither SQLAlchemy nor the tables nor the service's
    settings (core/bundles/ imports them where the store reads the database, on first use)."""
    code = "import sys, cli.code; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = set(done.stdout.split())
    assert not loaded & {"sqlalchemy", "sqlmodel", "core.settings", "core.tables", "core.db"}, sorted(loaded)


def test_a_project_cannot_stand_in_for_the_built_in_trainer(tmp_path: Path) -> None:
    """A built-in job's bundle (its model factory) is first on PYTHONPATH: its own `trainer.py` must not run in
    our trainer's place, and its other modules (here `core`) are still its own once the trainer runs."""
    from worker.launch_command import trainer_command

    project = tmp_path / "project"
    (project / "core").mkdir(parents=True)
    taken = tmp_path / "taken"
    (project / "trainer.py").write_text(f"open({str(taken)!r}, 'w').write('imported')\n")
    (project / "core" / "__init__.py").write_text("WHOSE = 'the project'\n")
    (project / "probe").mkdir()  # run as our trainer would be: `-m probe` runs probe/__main__.py
    (project / "probe" / "__init__.py").write_text("")
    (project / "probe" / "__main__.py").write_text("import core, sys\nprint(core.WHOSE, '|', sys.argv[1:])\n")
    env = rank_env("startup-test", None)
    env["PYTHONPATH"] = os.pathsep.join([str(project), env["PYTHONPATH"]])

    def rank(module: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *trainer_command(module), *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip

    ours = rank("trainer", "--help")
    assert ours.returncode == 0 and "--spec" in ours.stdout, ours.stderr  # our trainer's own usage
    assert not taken.exists(), "the project's trainer.py ran in our trainer's place"
    probe = rank("probe", "--spec", "x")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "the project | ['--spec', 'x']"  # the path as it was: the project's core
