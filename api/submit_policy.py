"""What the service refuses at submit time, beyond what the JobSpec model itself checks.

Each check raises `SpecRefused` naming the field (as a FastAPI `loc`) and what to do instead; a
limit's message names the limit and the setting that raises it. The queue quota raises
`QuotaExceeded` (a SpecRefused, so a route that knows only SpecRefused still refuses it).
"""

from __future__ import annotations

import json
import logging
import os
import re

from sqlalchemy import func, select
from sqlmodel import Session, col

from core import artifacts, bundles, capacity, code_policy, pools, resume_source
from core.artifacts import keys
from core.backends import BackendKind
from core.db import get_engine
from core.paths import UnsafePath, inside_dataset_roots, inside_runs_dir
from core.settings import Settings
from core.tables import TERMINAL_STATUSES, Checkpoint, Job
from trainer import catalogue
from trainer.data import confine
from trainer.spec import JobSpec

log = logging.getLogger(__name__)


class SpecRefused(ValueError):
    def __init__(self, loc: tuple[str, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


class QuotaExceeded(SpecRefused):
    """The spec is fine but the server has enough work for now: answer 429 with Retry-After."""

    def __init__(self, loc: tuple[str, ...], msg: str, retry_after_s: int = 30) -> None:
        super().__init__(loc, msg)
        self.retry_after_s = retry_after_s


def check_code(spec: JobSpec, settings: Settings) -> None:
    """A `code` bundle must be stored here, and must not hide rankzero's own trainer package."""
    if spec.code is None:
        return
    if not settings.allow_code_upload:
        raise SpecRefused(
            ("body", "code"), "code bundles are turned off on this server (RANKZERO_ALLOW_CODE_UPLOAD=false)"
        )
    try:
        found = bundles.manifest(settings, spec.code)
    except bundles.BundleError as exc:
        raise SpecRefused(("body", "code"), f"code {spec.code}: {exc}") from None
    if found is None:
        raise SpecRefused(
            ("body", "code"),
            f"code {spec.code} is not stored on this server: upload the folder first, e.g. "
            "`rankzero submit job.yaml --code DIR` (it packs, uploads and sets code), or POST the tar.gz to /api/code",
        )
    # A script job (spec `entrypoint`) never runs rankzero's trainer: its own `trainer` is its business.
    if "trainer" in found.top_level_modules() and not getattr(spec, "entrypoint", None):
        raise SpecRefused(
            ("body", "code"),
            "the bundle has a top-level 'trainer' package or module, which would hide rankzero's trainer on the "
            "ranks' PYTHONPATH: rename it (or move it into a package of its own)",
        )


def check_entrypoint(spec: JobSpec, settings: Settings) -> None:
    """A script job's script must be a file of its bundle (a `-m module` is looked up when it runs)."""
    entry = spec.parsed_entrypoint()
    if entry is None or entry.script is None or spec.code is None:
        return
    found = bundles.manifest(settings, spec.code)
    files = {path for path, _ in found.paths} if found is not None else set()
    if entry.script not in files:
        scripts = sorted(p for p in files if p.endswith(".py"))[:5]
        raise SpecRefused(
            ("body", "entrypoint"),
            f"entrypoint script {entry.script!r} is not a file of code {spec.code}: give its path relative to the "
            f"folder you uploaded (its Python files include: {', '.join(scripts) or 'none'})",
        )


def check_environment(spec: JobSpec, settings: Settings) -> None:
    """A job's own packages (spec `environment`, issue 28) only where the admin allows them."""
    if spec.environment is not None and settings.environments == "off":
        raise SpecRefused(
            ("body", "environment"),
            "user environments are turned off on this server (RANKZERO_ENVIRONMENTS=off): remove `environment`, "
            "or ask its admin for the packages",
        )


def check_user_code(spec: JobSpec, settings: Settings) -> None:
    refusal = code_policy.user_code_refusal(spec, settings)
    if refusal is not None:
        field, message = refusal
        raise SpecRefused(("body", field, "name"), message)


def check_resume_from(spec: JobSpec, settings: Settings) -> JobSpec:
    """Return the spec with resume_from as the checkpoint's key (`job_<id>/checkpoints/step_<N>.pt`, relative to
    the runs dir: core/resume_source.py), never a host's absolute path: every worker finds it by that key, in its
    own runs dir or the artifact store. The file must be in the API's runs dir (no link leaving it) or, for a
    job's file, recorded as its checkpoint or held by the store (a job that ran on a host that uploads)."""
    if spec.resume_from is None:
        return spec
    runs = settings.resolved_runs_dir
    try:
        key = resume_source.resume_key(spec.resume_from, runs, runs.resolve())
        if _PERCENT.search(key):
            raise UnsafePath("path contains percent-encoding; give the plain file path")
    except (keys.BadKey, UnsafePath) as exc:
        raise SpecRefused(("body", "resume_from"), f"resume_from refused: {exc}") from None
    local = runs / key
    if local.exists() or local.is_symlink():  # the API's runs dir holds it: it must not leave it (no link out)
        try:
            path = inside_runs_dir(key, runs)
        except UnsafePath as exc:
            raise SpecRefused(("body", "resume_from"), f"resume_from refused: {exc}") from None
        if not path.is_file():
            raise SpecRefused(("body", "resume_from"), "resume_from: no such checkpoint file inside the runs dir")
        key = path.relative_to(runs.resolve()).as_posix()
    elif not _recorded_or_stored(key, settings):
        raise SpecRefused(
            ("body", "resume_from"),
            f"resume_from: no checkpoint {key} in the runs dir or the artifact store "
            "(give one `rankzero checkpoints JOB` lists)",
        )
    return spec.model_copy(update={"resume_from": key})


_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")


def _recorded_or_stored(key: str, settings: Settings) -> bool:
    """A job's file the API's runs dir lacks: a checkpoint the database recorded, or a file the store holds."""
    owned = resume_source.key_job(key)
    if owned is None:
        return False
    job_id, relative = owned
    with Session(get_engine(settings.resolved_database_url)) as session:
        row = session.execute(
            select(col(Checkpoint.id)).where(col(Checkpoint.job_id) == job_id, col(Checkpoint.path) == relative)
        ).first()
    if row is not None:
        return True
    try:
        return artifacts.find(settings, key) is not None
    except artifacts.StoreUnavailable:
        return False


def check_resume_fits(spec: JobSpec, settings: Settings) -> None:
    """A resume from a recorded checkpoint must keep its global batch and train at least one step.

    Read from the `checkpoints` row and its job's spec (never the file): the trainer would refuse the
    batch only once the job runs, and a max_steps at or below the checkpoint's step "succeeds" at once.
    """
    if spec.resume_from is None or spec.is_script:  # a script chooses its own batch and length
        return
    owned = resume_source.key_job(spec.resume_from)  # a key, made by check_resume_from
    if owned is None:
        return
    with Session(get_engine(settings.resolved_database_url)) as session:
        at = (col(Checkpoint.job_id) == owned[0], col(Checkpoint.path) == owned[1])
        found = session.execute(select(Checkpoint, Job).join(Job).where(*at)).all()
        for ckpt, job in found:
            try:
                batch = JobSpec.model_validate(job.spec).global_batch_size
            except ValueError:
                return  # a row we cannot read: the trainer still checks the file
            if batch != spec.global_batch_size:
                raise SpecRefused(
                    ("body", "resume_from"),
                    f"the checkpoint at step {ckpt.step} was trained with global batch {batch:,}; this spec's is "
                    f"{spec.global_batch_size:,} (batch_size × accumulation_steps × nproc × nnodes): "
                    "make them equal to resume exactly",
                )
            if spec.max_steps is not None and spec.max_steps <= ckpt.step:
                raise SpecRefused(
                    ("body", "max_steps"),
                    f"max_steps {spec.max_steps:,} is not beyond the checkpoint's step {ckpt.step:,}: the job "
                    f"would train 0 steps; set max_steps above {ckpt.step:,}",
                )
            return


def check_plain_text(spec: JobSpec) -> None:
    """Every string must be storable and printable: no lone surrogates (not UTF-8), no NUL."""
    encoded = json.dumps(spec.model_dump(mode="json"), ensure_ascii=False)
    try:
        encoded.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecRefused(
            ("body",), "the spec contains text that is not valid Unicode (a lone surrogate); send UTF-8 text"
        ) from None
    if "\x00" in encoded or "\\u0000" in encoded:
        raise SpecRefused(("body",), "the spec contains a NUL character; remove it")


def check_data_paths(spec: JobSpec, settings: Settings) -> JobSpec:
    """Return the spec with its data folder (root / path) resolved inside the allowed data set folders."""
    arg = confine.path_arg(spec.data.name)
    if arg is None:
        return spec
    field = f"data.args.{arg}"
    if arg not in spec.data.args and arg == "path":
        raise SpecRefused(
            ("body", "data", "args", arg),
            f"data {spec.data.name!r} needs {field}: a folder under {settings.resolved_datasets_dir}",
        )
    try:
        path = inside_dataset_roots(spec.data.args.get(arg, "."), field, settings)
    except UnsafePath as exc:
        raise SpecRefused(("body", "data", "args", arg), str(exc)) from None
    data = spec.data.model_copy(update={"args": {**spec.data.args, arg: str(path)}})
    return spec.model_copy(update={"data": data})


def check_pool(spec: JobSpec, settings: Settings, known: pools.Pools | None = None) -> JobSpec:
    """Return the spec with `pool` set to the pool it runs in (its own, else the API's RANKZERO_QUEUE); a pool
    that does not exist is refused, naming those that do (core/pools.py)."""
    known = known or pools.load(get_engine(settings.resolved_database_url), settings)
    try:
        pool = pools.resolve(spec.pool, known)
    except pools.UnknownPool as exc:
        raise SpecRefused(("body", "pool"), str(exc)) from None
    return spec if spec.pool == pool else spec.model_copy(update={"pool": pool})


def check_capacity(spec: JobSpec, settings: Settings, known: pools.Pools | None = None) -> None:
    """Capacity per pool: a hosts pool's jobs against that pool's hosts; a Slurm pool's nnodes against its
    partition's nodes as its agent last saw them (Slurm decides the rest, docs/slurm.md)."""
    known = known or pools.load(get_engine(settings.resolved_database_url), settings)
    pool = spec.pool or settings.queue
    if known.backend(pool) is BackendKind.slurm:
        reason = pools.slurm_fit_refusal(spec, known.slurm[pool])
        if reason:
            raise SpecRefused(("body", "nnodes"), reason)
        return
    reason = capacity.check_fits(spec, settings, pool)
    if reason:
        field = "nnodes" if spec.nnodes > 1 and "nnodes" in reason else "nproc"
        raise SpecRefused(("body", field), reason)


# --- resource limits (each names its setting) ---------------------------------------------------


def _limit(loc: tuple[str, ...], what: str, value: int, limit: int, setting: str, hint: str) -> SpecRefused:
    return SpecRefused(
        loc, f"{what} is {value:,}, over this server's limit of {limit:,} (RANKZERO_{setting.upper()}); {hint}"
    )


def cpu_rank_limit(settings: Settings) -> int:
    """Most ranks of a CPU job: RANKZERO_MAX_CPU_RANKS, else the API host's CPU count."""
    return settings.max_cpu_ranks or os.cpu_count() or 1


def check_cpu_ranks(spec: JobSpec, settings: Settings, known: pools.Pools | None = None) -> None:
    known = known or pools.load(get_engine(settings.resolved_database_url), settings)
    pool = spec.pool or settings.queue
    if known.backend(pool) is BackendKind.slurm and settings.max_cpu_ranks is None:
        return  # the ranks take the cluster's cores, not this host's: only an explicit RANKZERO_MAX_CPU_RANKS binds
    if capacity.gpus_needed(spec, capacity.largest_gpu_count(settings, pool)) != 0:
        return  # a GPU job: check_capacity compares nproc with the GPUs
    limit = cpu_rank_limit(settings)
    smallest = spec.min_nproc or spec.nproc  # elastic fit starts with what a host has
    if smallest > limit:
        raise _limit(
            ("body", "min_nproc" if spec.min_nproc else "nproc"),
            "nproc of a CPU job",
            smallest,
            limit,
            "max_cpu_ranks",
            "each rank takes a core: lower nproc (accumulation_steps keeps the global batch)",
        )


def check_loader_and_batch(spec: JobSpec, settings: Settings) -> None:
    if spec.data.num_workers > settings.max_num_workers:
        raise _limit(
            ("body", "data", "num_workers"),
            "data.num_workers (DataLoader workers per rank)",
            spec.data.num_workers,
            settings.max_num_workers,
            "max_num_workers",
            "lower it",
        )
    if spec.global_batch_size > settings.max_global_batch:
        raise _limit(
            ("body", "batch_size"),
            "the global batch (batch_size × accumulation_steps × nproc × nnodes)",
            spec.global_batch_size,
            settings.max_global_batch,
            "max_global_batch",
            "lower batch_size or accumulation_steps",
        )


def model_params(spec: JobSpec) -> int | None:
    """Parameters of a built-in model from its args (None for user code, which the server cannot size)."""
    try:
        return catalogue.model_params(spec.model.name, spec.model.args)
    except catalogue.ArgError as exc:
        raise SpecRefused(("body", "model", "args", exc.key), str(exc)) from None


def data_elements(spec: JobSpec) -> int | None:
    """Numbers a generated data set holds (inputs, targets and the label map); None for the others."""
    try:
        return catalogue.data_elements(spec.data.name, spec.data.args)
    except catalogue.ArgError as exc:
        raise SpecRefused(("body", "data", "args", exc.key), str(exc)) from None


def check_sizes(spec: JobSpec, settings: Settings) -> None:
    params = model_params(spec)
    if params is not None and params > settings.max_model_params:
        raise _limit(
            ("body", "model", "args"),
            f"the parameter count of model {spec.model.name!r}",
            params,
            settings.max_model_params,
            "max_model_params",
            "make it smaller",
        )
    elements = data_elements(spec)
    if elements is not None and elements > settings.max_data_elements:
        raise _limit(
            ("body", "data", "args"),
            f"data {spec.data.name!r} (samples × sample size, per rank)",
            elements,
            settings.max_data_elements,
            "max_data_elements",
            "lower num_samples or the sample size",
        )


def active_jobs(settings: Settings) -> int:
    """Jobs queued or running (any state short of finished)."""
    with Session(get_engine(settings.resolved_database_url)) as session:
        query = select(func.count()).select_from(Job).where(Job.status.not_in(list(TERMINAL_STATUSES)))  # type: ignore[attr-defined]
        return int(session.execute(query).scalar_one())


def check_quota(settings: Settings) -> None:
    active = active_jobs(settings)
    if active >= settings.max_active_jobs:
        raise QuotaExceeded(
            ("body",),
            f"{active:,} jobs are queued or running, this server's limit is {settings.max_active_jobs:,} "
            "(RANKZERO_MAX_ACTIVE_JOBS): submit again when some have finished, or cancel some",
        )


def apply(spec: JobSpec, settings: Settings) -> JobSpec:
    """Run every submit check; return the spec to store (paths resolved)."""
    check_plain_text(spec)
    check_code(spec, settings)
    check_entrypoint(spec, settings)
    check_environment(spec, settings)
    check_user_code(spec, settings)
    spec = check_resume_from(spec, settings)
    check_resume_fits(spec, settings)
    spec = check_data_paths(spec, settings)
    known = pools.load(get_engine(settings.resolved_database_url), settings)
    spec = check_pool(spec, settings, known)
    check_capacity(spec, settings, known)
    check_cpu_ranks(spec, settings, known)
    check_loader_and_batch(spec, settings)
    check_sizes(spec, settings)
    check_quota(settings)  # last: a spec the server would refuse anyway is told so, not to wait
    return spec
