"""Before a launch: the job's environment, resolved (once per job), built (once per host) or found cached.

`prepare(...)` returns None for a job without `environment`, else `Ready`: the interpreter the ranks run
with and what the timeline says. It raises `EnvironmentFailed` with uv's own message (no such package, a
conflict, no wheel) or the reason it cannot run (environments turned off, a requirements file missing):
node 0 fails the job with it, never as a host loss and never against max_restarts (worker/node_zero.py).

The layout of an entry: a venv (`uv venv --relocatable`) of the worker's Python whose site-packages holds
the lock's packages the service lacks (or has at another version), and a `.pth` that appends the service's
own site-packages after them: torch, torchvision, CUDA's wheels and rankzero's own dependencies are seen,
not copied; a package of the lock shadows the service's copy of it. A job naming torch itself resolves
without the service's torch pins and so installs its own (a full torch and CUDA, GBs: the log says how big).
"""

from __future__ import annotations

import importlib.metadata
import logging
import platform
import re
import secrets
import shutil
import site
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from sqlalchemy.engine import Engine

from core import jobs, run_files
from core.settings import Settings
from trainer.run_dir import RunDir
from trainer.spec import EnvironmentSpec
from worker.environments import cache, lock, record, requirements, uv

log = logging.getLogger("rankzero.worker")
OVERLAY_PTH = "_rankzero_service.pth"
RUN_DIR_JOB = re.compile(r"(?:^|/)job_(\d+)/")


class EnvironmentFailed(RuntimeError):
    """The job's environment cannot be made; the message (uv's own, where uv failed) is the job's error."""


@dataclass(frozen=True)
class Ready:
    python: Path  # the interpreter torchrun and the ranks run with
    root: Path  # the entry (mounted read-only in the sandbox)
    key: str
    packages: int  # pins in the lock
    installed: int  # of which the entry holds its own copy
    cached: bool
    seconds: float

    def summary(self) -> str:
        how = "cached" if self.cached else "built"
        plural = "" if self.packages == 1 else "s"
        return f"environment: {self.packages} package{plural} ({self.installed} own), {how} in {self.seconds:.1f} s"


@dataclass(frozen=True)
class Service:
    """The worker's own environment, the base every entry is layered over."""

    python: str
    torch: str
    dists: dict[str, str]
    site_dirs: list[str]


@lru_cache(maxsize=1)
def service() -> Service:
    """Read once per worker process (its environment does not change under it)."""
    dirs = [d for d in site.getsitepackages() if Path(d).is_dir()]
    dists = {}
    for d in importlib.metadata.distributions(path=dirs):
        name = d.metadata["Name"]
        if name:
            dists.setdefault(canonicalize_name(name), d.version)
    return Service(platform.python_version(), dists.get("torch", "none"), dists, dirs)


def _resumed_job(spec: Any) -> int | None:
    """The job whose checkpoint this one resumes (its run dir `job_<id>/` in resume_from), if any."""
    found = RUN_DIR_JOB.search(str(getattr(spec, "resume_from", None) or ""))
    return int(found.group(1)) if found else None


def _tick(keep_alive: Callable[[], object] | None, every: float = 2.0) -> Callable[[], None]:
    last = [time.monotonic()]

    def tick() -> None:
        if keep_alive is not None and time.monotonic() - last[0] >= every:
            last[0] = time.monotonic()
            keep_alive()

    return tick


def log_path(run: RunDir, attempt: int, node_rank: int) -> Path:
    """Where uv's output for an attempt goes (the job page's environment panel shows its tail; node 0's is in
    the merged console)."""
    return run.environment_log(attempt, node_rank)


def asked(wanted: EnvironmentSpec) -> str:
    """What the job names, in words: 'requirements.txt + 2 requirements'."""
    n = len(wanted.packages)
    listed = f"{n} requirement{'s' if n != 1 else ''}" if n else ""
    return " + ".join(part for part in (wanted.requirements or "", listed) if part)


def for_attempt(  # noqa: PLR0913 (the attempt, and how it stays alive)
    engine: Engine,
    settings: Settings,
    job_id: int,
    attempt: int,
    spec: Any,
    run: RunDir,
    code_dir: Path | None,
    node_rank: int = 0,
    keep_alive: Callable[[], object] | None = None,
) -> Ready | None:
    """`prepare` for one attempt of a job: node 0 resolves (once per job) and says so on the timeline; the
    other nodes install the lock node 0 recorded."""
    wanted = requirements.environment_of(spec)
    if wanted is None:
        return None
    if node_rank == 0:
        jobs.note(engine, job_id, f"preparing environment: {asked(wanted)}")
    return prepare(engine, settings, job_id, spec, code_dir, log_path(run, attempt, node_rank), keep_alive,
                   resolve=node_rank == 0, evict_after=True)  # fmt: skip


def prepare(  # noqa: PLR0913 (what a preparation needs: the job, where to log, how to stay alive)
    engine: Engine,
    settings: Settings,
    job_id: int,
    spec: Any,
    code_dir: Path | None,
    log_file: Path,
    keep_alive: Callable[[], object] | None = None,
    resolve: bool = True,
    evict_after: bool = False,
) -> Ready | None:
    """The job's environment on this host (None: the job names none). `resolve` False (a follower): use the
    lock node 0 recorded, never resolve one, record nothing. After a build the cache is fitted under its cap:
    before returning, or (`evict_after`, what an attempt does) in a thread, so the job's start never waits
    for the walk over the cache's files."""
    wanted = requirements.environment_of(spec)
    if wanted is None:
        return None
    start = time.monotonic()
    try:
        ready = _prepare(engine, settings, job_id, wanted, spec, code_dir, log_file, keep_alive, resolve)
    except (uv.UvFailed, EnvironmentFailed, requirements.RequirementsError, OSError) as exc:
        said = f"this host could not build the environment: {exc}" if isinstance(exc, OSError) else str(exc)
        if resolve:
            record.done(engine, job_id, key=None, cached=False, prepare_s=time.monotonic() - start, error=said)
        raise EnvironmentFailed(said) from None
    if resolve:
        record.done(engine, job_id, key=ready.key, cached=ready.cached, prepare_s=ready.seconds,
                    size_bytes=_size(settings, ready.key))  # fmt: skip
    if not ready.cached and evict_after:  # every host that built (a follower's too) keeps its cache under the cap
        threading.Thread(target=_evict, args=(engine, settings), name="environment-evict", daemon=True).start()
    elif not ready.cached:
        _evict(engine, settings)
    return ready


def _prepare(  # noqa: PLR0913
    engine: Engine,
    settings: Settings,
    job_id: int,
    wanted: EnvironmentSpec,
    spec: Any,
    code_dir: Path | None,
    log_file: Path,
    keep_alive: Callable[[], object] | None,
    resolve: bool,
) -> Ready:
    if settings.environments == "off":
        raise EnvironmentFailed(
            "this service has user environments turned off (RANKZERO_ENVIRONMENTS=off): remove `environment` "
            "from the spec, or ask its admin for the packages"
        )
    start, tick = time.monotonic(), _tick(keep_alive)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    reqs = requirements.gather(wanted, code_dir)
    base = service()
    row = record.begin(engine, job_id, requirements.input_hash(reqs)) if resolve else record.get(engine, job_id)
    locked = row.lock if row is not None else None
    if locked is None and not resolve:
        raise EnvironmentFailed("node 0 recorded no environment lock for this job")
    if locked is None:
        locked = _lock_for(engine, settings, job_id, reqs, spec, base, log_file, tick)
    return _ensure(settings, locked, base, log_file, tick, start)


def _evict(engine: Engine, settings: Settings) -> None:
    try:  # housekeeping: never fail a job that is ready
        removed = cache.evict(settings.resolved_environment_dir, record.keys_in_use(engine),
                              settings.environment_cache_max_bytes)  # fmt: skip
    except Exception:
        log.exception("environment cache: eviction failed")
        return
    if removed:
        log.info("environment cache: removed %d least recently used entries", len(removed))


def _size(settings: Settings, key: str) -> int | None:
    for entry in cache.entries(settings.resolved_environment_dir):
        if entry.key == key:
            return entry.size
    return None


def _lock_for(  # noqa: PLR0913
    engine: Engine,
    settings: Settings,
    job_id: int,
    reqs: list[str],
    spec: Any,
    base: Service,
    log_path: Path,
    tick: Callable[[], None],
) -> str:
    """The job's lock: the one `environment.lock_from` names (a clone's source), else another job's for the same
    set (the resumed job's or its sweep's first trial's whatever their age, or a recent one), else a fresh
    resolution."""
    ihash = requirements.input_hash(reqs)
    own_torch = requirements.names_own_torch(reqs)
    source = getattr(requirements.environment_of(spec), "lock_from", None)
    if source is not None:
        resolved = _carried_lock(engine, settings, source, ihash, reqs, own_torch, base, log_path, tick)
    else:
        earlier = _resumed_job(spec) or record.sweep_source(engine, job_id)
        found = record.reusable_lock(engine, ihash, base.python, base.torch, settings.environment_reuse_s, earlier)
        if found is not None:
            _say(
                settings,
                log_path,
                "rankzero: the same requirements were resolved for an earlier job: its lock is reused",
            )
        resolved = found if found is not None else resolve_lock(settings, reqs, own_torch, base, log_path, tick)
    pins = lock.parse(resolved)
    packages = [{"name": p.name, "version": p.version} for p in pins]
    return record.save_lock(engine, job_id, resolved, packages, own_torch, base.python, base.torch)


def _say(settings: Settings, log_path: Path, line: str) -> None:
    with run_files.open_file(log_path, "a", settings.resolved_runs_dir) as out:
        out.write(f"{line}\n")


def _carried_lock(  # noqa: PLR0913
    engine: Engine,
    settings: Settings,
    source: int,
    ihash: str,
    reqs: list[str],
    own_torch: bool,
    base: Service,
    log_path: Path,
    tick: Callable[[], None],
) -> str:
    """The lock of job `source` (spec `environment.lock_from`, what a clone carries), whatever its age: exactly
    it when the requirements are the source's; requirements edited since are resolved preferring its versions
    (as `uv lock` keeps a lock file's versions), so only what changed moves."""
    row = record.get(engine, source)
    if row is None or row.lock is None:
        raise EnvironmentFailed(
            f"environment.lock_from: job {source} has no recorded lock (it never prepared its environment, or was "
            "deleted): remove lock_from from the spec to resolve the requirements afresh"
        )
    if row.input_hash == ihash:
        _say(settings, log_path, f"rankzero: installing the lock of job {source} (environment.lock_from), unchanged")
        return row.lock
    _say(settings, log_path, f"rankzero: the requirements differ from job {source}'s: resolving them, preferring "
                             "its locked versions (environment.lock_from)")  # fmt: skip
    return resolve_lock(settings, reqs, own_torch, base, log_path, tick, prefer=row.lock)


def resolve_lock(  # noqa: PLR0913
    settings: Settings,
    reqs: list[str],
    own_torch: bool,
    base: Service,
    log_path: Path,
    tick: Callable[[], None],
    prefer: str | None = None,
) -> str:
    """`uv pip compile` of the requirements, preferring the versions of `prefer` (a lock) and then the service's
    (its torch pinned, unless the job names its own): the fewer packages an entry holds of its own, the smaller
    and faster it is."""
    root = settings.resolved_environment_dir
    work = root / ".resolve" / secrets.token_hex(8)
    work.mkdir(mode=0o700, parents=True)
    try:
        (work / "requirements.in").write_text("".join(f"{r}\n" for r in reqs))
        # An existing output file is uv's preferences: the service's versions, where the requirements allow.
        preferred = {**base.dists, **{p.name: p.version for p in lock.parse(prefer or "")}}
        (work / "lock.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(preferred.items())))
        args = ["pip", "compile", "requirements.in", "-o", "lock.txt", "--python", sys.executable, "--no-header",
                "--no-annotate", *uv.index_args(settings)]  # fmt: skip
        if not own_torch:
            keep = [f"{n}=={v}\n" for n, v in sorted(base.dists.items()) if requirements.is_torch_family(n)]
            (work / "constraints.txt").write_text("".join(keep))
            args += ["--constraint", "constraints.txt"]
        uv.run(args, settings, log_path, tick, work, settings.environment_build_timeout_s)
        return lock.text(lock.parse((work / "lock.txt").read_text()))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ensure(
    settings: Settings, locked: str, base: Service, log_path: Path, tick: Callable[[], None], start: float
) -> Ready:
    """The entry of `locked` on this host: found (a cached start), or built under its lock."""
    root = settings.resolved_environment_dir
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    pins = lock.parse(locked)
    install = lock.to_install(pins, base.dists)
    key = lock.cache_key(locked, base.python, base.torch, install, base.site_dirs)
    cached = cache.is_built(root, key)
    if not cached:
        with cache.locked(root, key, tick):
            if not cache.is_built(root, key):
                _build(settings, root, key, install, base, log_path, tick)
    cache.touch(root, key)
    if cached:
        with run_files.open_file(log_path, "a", settings.resolved_runs_dir) as out:
            out.write(f"rankzero: environment {key[:12]} found in this host's cache ({len(pins)} packages)\n")
    return Ready(cache.python_of(root, key), cache.entry_dir(root, key), key, len(pins), len(install), cached,
                 time.monotonic() - start)  # fmt: skip


def _build(  # noqa: PLR0913
    settings: Settings,
    root: Path,
    key: str,
    install: list[lock.Pin],
    base: Service,
    log_path: Path,
    tick: Callable[[], None],
) -> None:
    tmp = cache.partial(root, key)
    timeout = settings.environment_build_timeout_s
    try:
        uv.run(["venv", str(tmp), "--python", sys.executable, "--relocatable", "--no-project", "--quiet"],
               settings, log_path, tick, root, timeout)  # fmt: skip
        site_packages = next(tmp.glob("lib/python*/site-packages"))
        overlay = "".join(f"import site; site.addsitedir({d!r})\n" for d in base.site_dirs)
        (site_packages / OVERLAY_PTH).write_text(overlay)
        if install:
            (tmp / "rankzero-install.txt").write_text(lock.text(install))
            uv.run(["pip", "install", "--python", str(tmp / "bin" / "python"), "--no-deps",
                    "-r", str(tmp / "rankzero-install.txt"), *uv.index_args(settings)],
                   settings, log_path, tick, root, timeout)  # fmt: skip
            uv.compile_bytecode(site_packages, settings, log_path, tick, timeout)  # never by the entry's python
        size = cache.publish(root, key, tmp, {"packages": len(install), "python": base.python, "torch": base.torch})
        with run_files.open_file(log_path, "a", settings.resolved_runs_dir) as out:
            out.write(f"rankzero: environment {key[:12]} built: {len(install)} packages of its own, "
                      f"{size / 1e6:.1f} MB\n")  # fmt: skip
    finally:
        cache.remove_tree(tmp)
