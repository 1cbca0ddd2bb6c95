"""Starting torchrun for one attempt of a job: command line, environment, rendezvous, sandbox.

Rendezvous is torchrun's static one (issue 19 item 2): node 0's agent hosts a TCPStore at the
master address and port, the others join it; nothing read back from the store is ever unpickled
(torchrun's c10d rendezvous `pickle.loads` the state it reads, and the store has no authentication).
A sandboxed single-node attempt has a network namespace of its own, so its master port is a fixed one
nobody else can take; without the sandbox, or across nodes, it is a port found free just before.

Every attempt runs in a sandbox (worker/sandbox.py) unless RANKZERO_SANDBOX=off."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.paths import dataset_env
from core.settings import Settings, get_settings
from rankzero.env import JobEnv
from trainer.entrypoint import Entrypoint, parse_entrypoint
from trainer.run_dir import RunDir
from worker import sandbox
from worker.bundles import cache_dir, pythonpath_first
from worker.script_jobs import script_workdir

MARK_ENV = "RANKZERO_JOB_MARK"  # every rank inherits it: lets us find ranks torchrun put in new sessions


def trainer_module() -> str:
    # A test hook: tests may point the launcher at a stand-in trainer module.
    return os.environ.get("RANKZERO_TRAINER_MODULE", "trainer")


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


def free_port() -> int:
    """A TCP port nothing listens on now, for a rendezvous outside a network namespace of its own
    (another process may still take it before torchrun binds it: `port_taken` tells that failure apart)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def build_command(
    run: RunDir,
    job_id: int,
    attempt: int,
    nproc: int | Topology,
    port: int,
    entry: Entrypoint | None = None,
) -> list[str]:
    """torchrun's command line: the built-in trainer, or a script job's entrypoint (`<script> <args>`
    or `-m <module> <args>`, words as the user gave them: no shell ever parses them)."""
    topo = nproc if isinstance(nproc, Topology) else Topology(nproc=nproc)
    torchrun = [
        sys.executable, "-m", "torch.distributed.run",
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
    return [*torchrun, "-m", trainer_module(), "--spec", str(run.spec), "--run-dir", str(run.root)]


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
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
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
    run.checkpoints.mkdir(exist_ok=True)
    run.tensorboard.mkdir(exist_ok=True)
    entry = parse_entrypoint(spec["entrypoint"]) if spec.get("entrypoint") else None
    cwd = script_workdir(run, entry, code_dir) if entry is not None else run.root
    log_dir = node_log_dir(run, attempt, topo.node_rank)
    log_dir.mkdir(parents=True, exist_ok=True)
    if topo.node_rank == 0:
        tmp = run.spec.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(spec, indent=2))
        tmp.replace(run.spec)
    sandboxed = settings.sandbox == "on"
    host_network = topo.several or needs_network(spec, settings)
    port = SANDBOXED_MASTER_PORT if sandboxed and not host_network else free_port()
    mark = f"{job_id}-{attempt}-{uuid.uuid4().hex}"
    node = "" if topo.node_rank == 0 else f".node_{topo.node_rank}"
    launcher_log = run.logs / f"attempt_{attempt}{node}.torchrun.log"
    env = pythonpath_first(
        rank_env(mark, cuda_visible_devices, settings, job_env(run, spec, job_id, attempt, settings)), code_dir
    )
    guarded = [str(settings.cancel_grace_s), *build_command(run, job_id, attempt, topo, port, entry)]
    if not sandboxed:
        with open(launcher_log, "ab") as out:
            out.write(f"rankzero: warning: {sandbox.NOT_ISOLATED}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                [sys.executable, "-m", "worker.rank_guard", *guarded],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,  # its own process group: a signal to the group reaches torchrun, never us
                preexec_fn=die_with_supervisor(),
            )
        return Launched(proc, mark, port, log_dir, launcher_log, warning=sandbox.NOT_ISOLATED)
    box = sandbox.prepare(
        sandbox_view(run, cwd, code_dir, settings, env, host_network=host_network, inputs=resume_input(spec, settings)),
        mark,
        memory_limit_mb(spec, settings),
        settings.sandbox_pids_max,
    )
    env["HOME"] = env["TMPDIR"] = sandbox.SANDBOX_TMP  # the worker's own are not in the job's view
    try:
        with open(launcher_log, "ab") as out:
            proc = subprocess.Popen(
                box.command([sys.executable, "-m", "worker.sandbox_guard", str(box.watch_read), *guarded]),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,  # its own process group: a signal to the group reaches torchrun, never us
                preexec_fn=box.preexec(),
                pass_fds=(box.watch_read,),
            )
    except BaseException:
        box.started(None)
        sandbox.end(mark)
        raise
    box.started(proc)
    return Launched(proc=proc, mark=mark, port=port, log_dir=log_dir, launcher_log=launcher_log)


def memory_limit_mb(spec: dict, settings: Settings) -> int | None:
    """The job's memory limit, for the kernel to enforce: its spec's, else the server's default."""
    own = spec.get("memory_limit_mb")
    return own if isinstance(own, int) and own > 0 else settings.job_memory_limit_mb


def needs_network(spec: dict, settings: Settings) -> bool:
    """Does a single-node attempt share the host's network (else: loopback only)? When the server says
    so (RANKZERO_SANDBOX_NETWORK=host), or for a built-in data set's download (`data.args.download`:
    torchvision fetches it; the datasets dir keeps it for every later job)."""
    if settings.sandbox_network == "host":
        return True
    data = spec.get("data")
    args = data.get("args") if isinstance(data, dict) else None
    return isinstance(args, dict) and args.get("download") is True


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


def sandbox_view(  # noqa: PLR0913 (one parameter per part of the view)
    run: RunDir,
    cwd: Path,
    code_dir: Path | None,
    settings: Settings,
    env: dict[str, str],
    *,
    host_network: bool,
    inputs: tuple[Path, ...] = (),
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
        hidden=(settings.data_dir.resolve(), settings.resolved_runs_dir, cache_dir(settings).resolve()),
        inputs=inputs,
        host_network=host_network,
        devices=sandbox.gpu_devices(),
        as_root=os.geteuid() == 0,
        system=sandbox.system_dirs(),
    )


# How torchrun's log reads when the master port was taken between `free_port()` and its bind.
PORT_TAKEN_WORDS = ("EADDRINUSE", "Address already in use", "address already in use")


def port_taken(launcher_log: Path) -> bool:
    """Did this attempt fail because its rendezvous port was taken by another process (not the job's
    fault: the supervisor retries on a fresh port without counting it against max_restarts)?"""
    try:
        with open(launcher_log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 65536))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return False
    return any(w in tail for w in PORT_TAKEN_WORDS)
