"""Starting torchrun for one attempt of a job: command line, environment, rendezvous, sandbox.

Rendezvous is torchrun's static one (issue 19 item 2): node 0's agent hosts a TCPStore at the
master address and port, the others join it; nothing read back from the store is ever unpickled
(torchrun's c10d rendezvous `pickle.loads` the state it reads, and the store has no authentication).
A sandboxed single-node attempt has a network namespace of its own, so its master port is a fixed one
nobody else can take; without the sandbox, or across nodes, it is a port found free just before.

Every attempt runs in a sandbox (worker/sandbox.py) unless RANKZERO_SANDBOX=off."""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core import run_files
from core.paths import dataset_env
from core.settings import Settings, get_settings
from rankzero.env import JobEnv
from trainer.data.download import FETCHED_ENV, wants_download
from trainer.entrypoint import Entrypoint, parse_entrypoint
from trainer.run_dir import RunDir
from worker import rank_network, sandbox
from worker.bundles import cache_dir, pythonpath_first
from worker.script_jobs import entrypoint_values, script_job_env, script_workdir

log = logging.getLogger("rankzero.worker")
MARK_ENV = "RANKZERO_JOB_MARK"  # every rank inherits it: lets us find ranks torchrun put in new sessions


SERVICE_ROOT = str(Path(__file__).resolve().parent.parent)


def trainer_module() -> str:
    # A test hook: tests may point the launcher at a stand-in trainer module.
    return os.environ.get("RANKZERO_TRAINER_MODULE", "trainer")


def trainer_command(module: str) -> list[str]:
    """How a rank starts the built-in trainer (`python -c …`, after torchrun's `--no-python PYTHON`): `module`'s
    package from the service's root, then run as `-m` would. The job's bundle is first on PYTHONPATH (its model
    factory's modules) and a project's own `trainer.py` must not stand in for ours; once our package is
    imported the path is as it was, so the factory's `core.models` or `utils` are still the project's."""
    top = module.split(".")[0]
    return [
        "-c",
        f"import sys; sys.path.insert(0, {SERVICE_ROOT!r}); import {top}; sys.path.remove({SERVICE_ROOT!r}); "
        f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)",
    ]


def guard_command(module: str) -> list[str]:
    """How torchrun's parent (worker/rank_guard.py, worker/sandbox_guard.py) starts: isolated, on the service's
    code alone. -S: no `site`, whose .pth files (an editable install's finder) cost ~0.1 s of every job's start.
    -I: neither the working folder (the job's files) nor PYTHONPATH (the bundle first, for the ranks) is on its
    path, so a project with a `worker/` package or a `subprocess.py` cannot stand in for the guard; the ranks
    it starts still get the whole environment. The guard needs the standard library and its own package only."""
    run = (
        f"import sys; sys.path.insert(0, {SERVICE_ROOT!r}); "
        f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-I", "-S", "-c", run]


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


SANDBOXED_MASTER_PORT = 29500  # torchrun's default; inside the attempt's own network namespace, always free


# Rendezvous and master ports come from here, outside the kernel's ephemeral range (issue 20): a port the
# kernel hands out for `bind(port 0)` or an outgoing connection is exactly what another process takes
# between our choice and torchrun's bind, seconds later. Here only a process asking for that very number can.
RENDEZVOUS_PORTS = range(20000, 32768)
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PORT_TRIES = 64


def ephemeral_ports(path: Path = EPHEMERAL_RANGE_FILE) -> range:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        low, high = (int(x) for x in path.read_text().split()[:2])
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def port_candidates(ephemeral: range, rng: random.Random, n: int = PORT_TRIES) -> list[int]:
    """`n` random ports to try, outside `ephemeral` (anywhere unprivileged when it covers all of ours)."""
    allowed = [p for p in RENDEZVOUS_PORTS if p not in ephemeral]
    if not allowed:
        allowed = [p for p in range(1024, 65536) if p not in ephemeral] or list(range(1024, 65536))
    return [rng.choice(allowed) for _ in range(n)]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))  # every address, as torchrun's store binds it
        except OSError:
            return False
    return True


def free_port(rng: random.Random | None = None, bindable: Callable[[int], bool] = _bindable) -> int:
    """A TCP port nothing is bound to now, for a rendezvous outside a network namespace of its own: random,
    and outside the ephemeral range, so no other process is handed it meanwhile. A process that binds it
    anyway fails the attempt with EADDRINUSE, which `port_taken` tells apart (retried on a fresh port)."""
    for port in port_candidates(ephemeral_ports(), rng or random.SystemRandom()):
        if bindable(port):
            return port
    span = f"{RENDEZVOUS_PORTS.start}-{RENDEZVOUS_PORTS.stop - 1}"
    raise OSError(f"no free port among {PORT_TRIES} random ones in {span} (outside the ephemeral range)")


@dataclass(frozen=True)
class Topology:
    """Where this torchrun sits in its job: ranks on this node, nodes, this node's rank, the rendezvous.

    One node: the store on 127.0.0.1 (in the sandbox's own network namespace). Several: node 0 hosts the
    store at the endpoint its claim wrote (node 0's registered address, a port free there), the others
    join it. torchrun's static rendezvous either way: no pickled state from the network."""

    nproc: int
    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = None  # host:port of node 0's store (several nodes)

    @property
    def several(self) -> bool:
        return self.nnodes > 1 and self.endpoint is not None

    def rendezvous_args(self, port: int) -> list[str]:
        if not self.several:
            return ["--nnodes=1", "--node-rank=0", "--master-addr=127.0.0.1", f"--master-port={port}"]
        assert self.endpoint is not None
        address, _, master_port = self.endpoint.rpartition(":")
        return [
            f"--nnodes={self.nnodes}",
            f"--node-rank={self.node_rank}",
            f"--master-addr={address.strip('[]')}",
            f"--master-port={master_port}",
        ]


@dataclass
class Launched:
    proc: subprocess.Popen[bytes]
    mark: str
    port: int
    log_dir: Path
    launcher_log: Path
    # Not None when the attempt runs unsandboxed (RANKZERO_SANDBOX=off): the line every job page shows.
    warning: str | None = None


def node_log_dir(run: RunDir, attempt: int, node_rank: int) -> Path:
    """torchrun's --log-dir: node 0 (and every one-node job) the attempt's folder, node r a folder in it."""
    base = run.attempt_logs(attempt)
    return base if node_rank == 0 else base / f"node_{node_rank}"


def build_command(  # noqa: PLR0913 (the python of a job's own environment joined the topology and entrypoint)
    run: RunDir,
    job_id: int,
    attempt: int,
    nproc: int | Topology,
    port: int,
    entry: Entrypoint | None = None,
    python: str | None = None,
) -> list[str]:
    """torchrun's command line: the built-in trainer, or a script job's entrypoint (`<script> <args>`
    or `-m <module> <args>`, words as the user gave them: no shell ever parses them). `python`: the job's
    own environment's interpreter (worker/environments/), else the worker's; the ranks inherit it."""
    topo = nproc if isinstance(nproc, Topology) else Topology(nproc=nproc)
    torchrun = [
        python or sys.executable, "-m", "torch.distributed.run",
        *topo.rendezvous_args(port),
        f"--nproc-per-node={topo.nproc}",
        "--rdzv-backend=static",  # never c10d: it unpickles what it reads from an unauthenticated store
        f"--rdzv-id=rankzero-{job_id}-{attempt}",
        "--max-restarts=0",  # restarts are the worker's business (spec.max_restarts), from a checkpoint
        f"--log-dir={node_log_dir(run, attempt, topo.node_rank)}",
        "--redirects=3",
    ]  # fmt: skip
    if entry is not None:
        return [*torchrun, *entry.argv()]
    ranks = ["--no-python", python or sys.executable, *trainer_command(trainer_module())]
    return [*torchrun, *ranks, "--spec", str(run.spec), "--run-dir", str(run.root)]


# What a rank sees of the worker's environment: an allow-list, so the API token, the database and
# broker URLs (passwords in compose) and anything else the worker holds never reach user code.
RANK_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TMP", "TEMP", "TZ", "LANG", "LANGUAGE", "TERM",
    "LD_LIBRARY_PATH", "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",  # torchvision downloads
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT",
    # Not secrets: markers the test suites find the processes they started by.
    "RANKZERO_RUNS_DIR", "RANKZERO_TEST_RUN",
})  # fmt: skip
RANK_ENV_PREFIXES = (
    "LC_", "PYTHON", "CUDA", "NCCL", "TORCH", "OMP_", "MKL_", "KMP_", "GLOO_", "NVIDIA_", "CUBLAS", "CUDNN",
)  # fmt: skip


def _passed_to_ranks(name: str, extra: frozenset[str]) -> bool:
    return name in RANK_ENV_NAMES or name in extra or name.startswith(RANK_ENV_PREFIXES)


def job_env(run: RunDir, spec: dict, job_id: int, attempt: int, settings: Settings) -> dict[str, str]:
    """What every rank is told about its job (rankzero/env.py names the variables; the SDK reads them)."""
    raw_checkpoint = spec.get("checkpoint")
    checkpoint = raw_checkpoint if isinstance(raw_checkpoint, dict) else {}
    keep_last = checkpoint.get("keep_last")
    described = JobEnv(
        run_dir=run.root.resolve(),
        job_id=job_id,
        attempt=attempt,
        datasets_dir=settings.resolved_datasets_dir,
        tensorboard_dir=run.tensorboard.resolve(),
        **({"keep_last": keep_last} if isinstance(keep_last, int) and keep_last >= 1 else {}),
        **script_job_env(spec, resume_input(spec, settings)),
    )
    return described.as_environ()


def rank_env(
    mark: str, cuda_visible_devices: str | None, settings: Settings | None = None, job: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of torchrun and its ranks: the allow-listed part of ours plus what the trainer needs.

    `job`: the job's own variables (`job_env`: RANKZERO_RUN_DIR, RANKZERO_JOB_ID, RANKZERO_ATTEMPT,
    RANKZERO_DATASETS_DIR, RANKZERO_TENSORBOARD_DIR, RANKZERO_KEEP_LAST), set over anything inherited.
    """
    extra = frozenset(settings.rank_env_names) if settings is not None else frozenset()
    env = {k: v for k, v in os.environ.items() if _passed_to_ranks(k, extra)}
    if settings is not None:
        env.update(dataset_env(settings))  # the data-path rules the API applied at submit, checked again
    env.update(job or {})
    env[MARK_ENV] = mark
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default too; explicit so N ranks don't fight over cores
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    # The repository root on the path, so `-m trainer` resolves however the worker was started.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SERVICE_ROOT, env.get("PYTHONPATH", "")) if p)
    return env


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
    input_fds = open_inputs(resume_input(spec, settings), settings)
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
                pass_fds=(box.watch_read, *(fd for fd, _ in input_fds)),
            )
    except BaseException:
        box.started(None)
        sandbox.end(mark)
        raise
    finally:
        _close(input_fds)
    box.started(proc)
    return Launched(proc=proc, mark=mark, port=port, log_dir=log_dir, launcher_log=launcher_log)


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


def memory_limit_mb(spec: dict, settings: Settings) -> int | None:
    """The job's memory limit, for the kernel to enforce: its spec's, else the server's default."""
    own = spec.get("memory_limit_mb")
    return own if isinstance(own, int) and own > 0 else settings.job_memory_limit_mb


def needs_network(spec: dict, settings: Settings) -> bool:
    """Does a single-node attempt share the host's network (else: loopback only)? Only when the server says
    so (RANKZERO_SANDBOX_NETWORK=host): a built-in data set's download (`data.args.download`) is the worker's,
    before the ranks start (`prefetch_data`), so the ranks need no network for it."""
    del spec  # the spec asks for nothing that needs the host's network
    return settings.sandbox_network == "host"


def resume_input(spec: dict, settings: Settings) -> tuple[Path, ...]:
    """The checkpoint a job resumes from, when it lies in another run of this runs dir (`rankzero resume`, a
    clone): shown read-only in the sandbox, the one file of another run it sees. The API confines resume_from
    to the runs dir at submit; a path outside it (or missing) is not shown, and the trainer says so."""
    given = spec.get("resume_from")
    if not isinstance(given, str) or not given:
        return ()
    runs = settings.resolved_runs_dir.resolve()
    path = (runs / given).resolve()  # an absolute `given` stays itself
    inside = path != runs and runs in path.parents
    return (path,) if inside and path.is_file() else ()


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


def sandbox_view(  # noqa: PLR0913 (one parameter per part of the view)
    run: RunDir,
    cwd: Path,
    code_dir: Path | None,
    settings: Settings,
    env: dict[str, str],
    *,
    host_network: bool,
    inputs: tuple[Path, ...] = (),
    input_fds: tuple[tuple[int, Path], ...] = (),
    environment: Path | None = None,
) -> sandbox.View:
    """What the attempt sees (worker/sandbox.py): its run dir, its bundle, the data sets, the runtime."""
    datasets = settings.resolved_datasets_dir
    datasets.mkdir(parents=True, exist_ok=True)
    return sandbox.View(
        run_dir=run.root.resolve(),
        cwd=cwd.resolve(),
        code_dir=code_dir.resolve() if code_dir is not None else None,
        datasets_dir=datasets,
        dataset_roots=tuple(r for r in settings.dataset_root_dirs if r != datasets),
        runtime_dirs=sandbox.runtime_dirs(env.get("PYTHONPATH", "")),
        hidden=(
            settings.data_dir.resolve(),
            settings.resolved_runs_dir,
            cache_dir(settings).resolve(),
            settings.resolved_environment_dir,
        ),  # fmt: skip
        inputs=inputs,
        input_fds=input_fds,
        environment_dir=environment.resolve() if environment is not None else None,
        host_network=host_network,
        devices=sandbox.gpu_devices(),
        as_root=os.geteuid() == 0,
        system=sandbox.system_dirs(),
        masked=sandbox.secret_paths(),
    )


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
