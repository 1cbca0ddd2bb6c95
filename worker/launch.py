"""Starting torchrun for one attempt of a job (worker/launch_command.py builds its command line, environment and
sandbox view): the spec written, the rank guard started in its own process group, in the sandbox or without it,
a built-in data set downloaded first.

Every attempt runs in a sandbox (worker/sandbox.py) unless RANKZERO_SANDBOX=off."""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core import run_files
from core.settings import Settings, get_settings
from trainer.data.download import FETCHED_ENV, wants_download
from trainer.entrypoint import parse_entrypoint
from trainer.run_dir import RunDir
from worker import rank_network, sandbox, sandbox_limits
from worker.bundles import pythonpath_first
from worker.launch_command import (
    SANDBOXED_MASTER_PORT,
    Topology,
    build_command,
    free_port,
    guard_command,
    job_env,
    memory_limit_mb,
    needs_network,
    node_log_dir,
    rank_env,
    resume_input,
    sandbox_view,
)
from worker.script_jobs import entrypoint_values, script_workdir

log = logging.getLogger("rankzero.worker")


PR_SET_PDEATHSIG = 1  # linux/prctl.h
DEATH_SIGNAL = signal.SIGUSR1  # what worker/rank_guard.py takes as "the supervisor died"


def die_with_supervisor() -> Callable[[], None] | None:
    """A preexec_fn that signals the rank guard (worker/rank_guard.py, torchrun's parent) when the
    thread that launched it dies (the worker killed, OOM): the guard sends torchrun one SIGTERM, which
    it forwards; the ranks checkpoint and exit 75, and nothing trains unsupervised.

    PR_SET_PDEATHSIG fires when the forking *thread* exits: a supervisor runs in the thread of its
    task from launch to outcome (Celery's solo and prefork pools: the process's main thread; the
    threads pool keeps its threads while the worker lives). None where there is no prctl (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before the flag was set
            os.kill(os.getpid(), DEATH_SIGNAL)

    return preexec


@dataclass
class Launched:
    proc: subprocess.Popen[bytes]
    mark: str
    port: int
    log_dir: Path
    launcher_log: Path
    # Not None when the attempt runs unsandboxed (RANKZERO_SANDBOX=off): the line every job page shows.
    warning: str | None = None
    disk_limit: str | None = None  # how the job's disk limit holds (worker/sandbox_disk.py), None: it has none


def launch(  # noqa: PLR0913 (settings is optional: callers that predate it get the worker's env settings)
    run: RunDir,
    spec: dict,
    job_id: int,
    attempt: int,
    nproc: int | Topology,
    cuda_visible_devices: str | None,
    settings: Settings | None = None,
    code_dir: Path | None = None,
    keep_alive: Callable[[], object] | None = None,
    environment: Path | None = None,
) -> Launched:
    """Write the attempt's spec and start torchrun in its own process group.

    `code_dir`: the job's unpacked code bundle (worker/bundles.py `code_dir`), first on the ranks' PYTHONPATH.
    A script job (spec `entrypoint`) runs its script in a working folder that shows the bundle's files
    (worker/script_jobs.py); the built-in trainer runs in the run dir. `nproc` may be a Topology: then
    node 0 writes the spec and the other nodes read the one it wrote (the runs dir is shared).
    """
    topo = nproc if isinstance(nproc, Topology) else Topology(nproc=nproc)
    settings = settings if settings is not None else get_settings()
    run.root.mkdir(parents=True, exist_ok=True)
    run_files.make_dirs(run.checkpoints, run.root)  # the job's links below its run dir are never followed
    run_files.make_dirs(run.tensorboard, run.root)
    entry = parse_entrypoint(spec["entrypoint"]) if spec.get("entrypoint") else None
    cwd = script_workdir(run, entry, code_dir) if entry is not None else run.root
    entry = entry.expanded(entrypoint_values(run, job_id, settings)) if entry is not None else None
    log_dir = node_log_dir(run, attempt, topo.node_rank)
    run_files.make_dirs(log_dir, run.root)
    if topo.node_rank == 0:
        run_files.write_atomic(run.spec, json.dumps(spec, indent=2), run.root)
    sandboxed = settings.sandbox == "on"
    host_network = topo.several or needs_network(spec, settings)
    port = SANDBOXED_MASTER_PORT if sandboxed and not host_network else free_port()
    mark = f"{job_id}-{attempt}-{uuid.uuid4().hex}"
    node = "" if topo.node_rank == 0 else f".node_{topo.node_rank}"
    launcher_log = run.logs / f"attempt_{attempt}{node}.torchrun.log"
    env = pythonpath_first(
        rank_env(mark, cuda_visible_devices, settings, job_env(run, spec, job_id, attempt, settings)), code_dir
    )
    if topo.several:  # every node's ranks advertise the host's registered address to their peers (issue 20)
        env.update(rank_network.pinned_env(settings.resolved_host_address, env))
    # The job's own environment (worker/environments/ `Ready.root`): torchrun and the ranks run its interpreter;
    # the sandbox shows it read-only.
    python = str(environment / "bin" / "python") if environment is not None else None
    if environment is not None:
        env["VIRTUAL_ENV"] = str(environment)
    guarded = [str(settings.cancel_grace_s), *build_command(run, job_id, attempt, topo, port, entry, python)]
    if not sandboxed:
        with run_files.open_file(launcher_log, "ab", run.root) as out:
            out.write(f"rankzero: warning: {sandbox.NOT_ISOLATED}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                [*guard_command("worker.rank_guard"), *guarded],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,  # its own process group: a signal to the group reaches torchrun, never us
                preexec_fn=die_with_supervisor(),
            )
        return Launched(proc, mark, port, log_dir, launcher_log, warning=sandbox.NOT_ISOLATED)
    if wants_download(spec):  # the job sees the datasets dir read-only: the worker downloads first
        prefetch_data(run, launcher_log, settings, keep_alive)
        env[FETCHED_ENV] = "1"
    # A checkpoint of the job's own run dir is in its view already (the run dir's bind). Bound by a descriptor it would
    # be the file underneath the run dir's filesystem (worker/sandbox_disk.py), which bwrap refuses as a race.
    own = run.root.resolve()
    input_fds = open_inputs(tuple(p for p in resume_input(spec, settings) if own not in p.parents), settings)
    try:
        box = sandbox.prepare(
            sandbox_view(
                run,
                cwd,
                code_dir,
                settings,
                env,
                host_network=host_network,
                input_fds=input_fds,
                environment=environment,
            ),  # fmt: skip
            mark,
            memory_limit_mb(spec, settings),
            settings.sandbox_pids_max,
            settings=settings,
            disk_limit_mb=sandbox_limits.disk_limit_mb(spec.get("disk_limit_mb"), settings.job_disk_limit_mb),
            own_disk_limit=spec.get("disk_limit_mb") is not None,
            several_nodes=topo.several,
        )
    except BaseException:
        _close(input_fds)
        raise
    env["HOME"] = env["TMPDIR"] = sandbox.SANDBOX_TMP  # the worker's own are not in the job's view
    try:
        with run_files.open_file(launcher_log, "ab", run.root) as out:
            proc = subprocess.Popen(
                box.command([*guard_command("worker.sandbox_guard"), str(box.watch_read), *guarded]),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,  # its own process group: a signal to the group reaches torchrun, never us
                preexec_fn=box.preexec(),
                pass_fds=(*box.pass_fds, *(fd for fd, _ in input_fds)),
            )
    except BaseException:
        box.started(None)
        sandbox.end(mark)
        raise
    finally:
        _close(input_fds)
    box.started(proc)
    disk = box.disk.mode.why if box.disk.mode is not None else None
    return Launched(proc=proc, mark=mark, port=port, log_dir=log_dir, launcher_log=launcher_log, disk_limit=disk)


class DataFetchFailed(OSError):
    """The worker's download of a built-in data set failed (the job fails saying why, before its ranks start)."""


def prefetch_data(run: RunDir, log_path: Path, settings: Settings, keep_alive: Callable[[], object] | None) -> None:
    """Download the spec's built-in data set as the worker, outside the job's sandbox (trainer/data/prefetch.py:
    torchvision's code only, under the once-per-host lock), keeping the job's heartbeat; bounded by
    startup_timeout_s. Its output goes to the attempt's launcher log."""
    env = rank_env("prefetch", None, settings)
    deadline = time.monotonic() + settings.startup_timeout_s
    with run_files.open_file(log_path, "ab", run.root) as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainer.data.prefetch", str(run.spec)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=run.root,
            start_new_session=True,
        )  # fmt: skip
    try:
        while True:
            try:
                code = proc.wait(timeout=min(5.0, settings.heartbeat_s))
                break
            except subprocess.TimeoutExpired:
                if keep_alive is not None:
                    keep_alive()
                if time.monotonic() > deadline:
                    limit = f"startup_timeout_s ({settings.startup_timeout_s:g} s)"
                    raise DataFetchFailed(f"downloading the data set took longer than {limit}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if code != 0:
        said = _last_rankzero_line(log_path, run.root)
        raise DataFetchFailed(f"the worker could not download the data set: {said or f'exit {code}'}")


def _last_rankzero_line(path: Path, root: Path) -> str | None:
    try:
        with run_files.open_file(path, "rb", root) as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 16384))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    said = [line.removeprefix("rankzero: ") for line in lines if line.startswith("rankzero: ")]
    return said[-1] if said else None


def open_inputs(paths: tuple[Path, ...], settings: Settings) -> tuple[tuple[int, Path], ...]:
    """Each input opened read-only from the runs dir down with no link followed (core/run_files.py), for bwrap
    to bind by descriptor: resume_input's check and the mount then see the same file, whatever the job that
    owns it does to its run dir meanwhile. One that is now a link is not shown (the trainer says it is missing)."""
    opened: list[tuple[int, Path]] = []
    for path in paths:
        try:
            opened.append((run_files.open_fd(path, os.O_RDONLY, settings.resolved_runs_dir), path))
        except OSError as exc:
            log.warning("resume_from %s is not shown to the job: %s", path, exc)
    return tuple(opened)


def _close(fds: tuple[tuple[int, Path], ...]) -> None:
    for fd, _ in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


# How torchrun's log reads when the master port was taken between `free_port()` and its bind.
PORT_TAKEN_WORDS = ("EADDRINUSE", "Address already in use", "address already in use")


def port_taken(launcher_log: Path, root: Path | None = None) -> bool:
    """Did this attempt fail because its rendezvous port was taken by another process (not the job's
    fault: the supervisor retries on a fresh port without counting it against max_restarts)? `root`: the run
    dir, below which no link the job made is followed (default: the log's folder)."""
    try:
        with run_files.open_file(launcher_log, "rb", root or launcher_log.parent) as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 65536))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return False
    return any(w in tail for w in PORT_TAKEN_WORDS)
