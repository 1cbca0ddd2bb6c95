"""Building torchrun's start for one attempt of a job: its command line, the ranks' environment, the rendezvous
port, the sandbox's view. worker/launch.py starts what this builds.

Rendezvous is torchrun's static one (issue 19 item 2): node 0's agent hosts a TCPStore at the
master address and port, the others join it; nothing read back from the store is ever unpickled
(torchrun's c10d rendezvous `pickle.loads` the state it reads, and the store has no authentication).
A sandboxed single-node attempt has a network namespace of its own, so its master port is a fixed one
nobody else can take; without the sandbox, or across nodes, it is a port found free just before."""

from __future__ import annotations

import os
import random
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.paths import dataset_env
from core.settings import Settings
from rankzero.env import JobEnv
from trainer.entrypoint import Entrypoint
from trainer.run_dir import RunDir
from worker import sandbox
from worker.bundles import cache_dir
from worker.script_jobs import script_job_env

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
    clone): shown read-only in the sandbox, the one file of another run it sees. `resume_from` is its key
    (relative to the runs dir) or the local path worker/resume_fetch.py provided before the launch (which
    failed the job, saying why, when it could not); a path outside the runs dir (or missing) is not shown."""
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
