"""Response models of the REST API: /openapi.json (and /docs) are generated from them; docs/api.md describes them."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from api.models_ranks import RanksView
from core.placement_record import BadPlacement, JobPlacement, read_placement
from core.tables import Checkpoint, Job, JobStatus, JobTransition
from trainer.spec import JobSpec


class EnvironmentEstimate(BaseModel):
    """At submit, for a job whose requirements ask for another torch than the server's (issue 28): it gets a full
    environment of its own on each host that runs it, about this big."""

    own_torch: bool = Field(True, description="Always true: the estimate is given only for a job with its own torch.")
    requirements: list[str] = Field(description="The requirements that exclude the server's torch ('torch==2.3.0').")
    service_torch: str | None = Field(description="The server's own torch version (null: it has none).")
    size_bytes: int = Field(description="The estimated disk the environment takes on each host.")
    basis: str = Field(description="How size_bytes was made, in words (it is an estimate, not a resolution).")
    note: str = Field(description="The whole estimate as a sentence (what `rankzero submit` prints).")


class JobPublic(BaseModel):
    id: int
    name: str
    status: JobStatus
    strategy: str
    spec: dict[str, Any]
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    worker_host: str | None
    step: int | None = Field(description="Optimizer steps done; null: a script job that never reported one.")
    total_steps: int | None
    epoch: int | None = Field(description="The epoch; null: a script job that never reported one.")
    samples: int | None = Field(description="Samples seen by all ranks; null: a script job that never reported them.")
    samples_per_s: float | None
    eta_s: float | None
    latest_loss: float | None
    error: str | None
    failed_rank: int | None
    exit_code: int | None
    global_batch_size: int
    priority: int = 0
    pool: str | None = Field(
        None,
        description="The pool it runs in (its spec's `pool`, else the server's RANKZERO_QUEUE at submit); null "
        "for a job submitted before pools were recorded.",
    )
    pending_reason: str | None = Field(None, description="Why a queued job waits (the scheduler's words).")
    placement: JobPlacement | None = Field(
        None, description="Where the scheduler put the job (null while it waits unplaced, and once it ended)."
    )
    host_losses: int = Field(0, description="Times the job resumed after losing a host (not counted as restarts).")
    restarts_used: int = Field(0, description="Failed attempts restarted so far (spec.max_restarts bounds them).")
    # --- team (issue 23) ---
    owner_id: int | None = Field(None, description="The id of the user who submitted it.")
    owner: str | None = Field(None, description="The name of the user who submitted it.")
    archived: bool = Field(False, description="Hidden from the default list (GET /api/jobs?archived=true shows it).")
    tags: list[str] = Field(default_factory=list, description="Labels to filter by (GET /api/jobs?tag=).")
    note: str | None = Field(None, description="Free text about the run.")
    # --- a job run by Slurm (issue 26; docs/slurm.md) ---
    backend_job_id: str | None = Field(
        None, description="The Slurm job id of a job of a Slurm pool (worker_host: 'slurm:<pool>'); null otherwise."
    )
    backend_partition: str | None = Field(None, description="The Slurm partition the job was submitted to.")
    backend_nodes: str | None = Field(
        None, description="The Slurm nodes it runs (or ran) on, in Slurm's form ('n[1-2]'); null while it waits."
    )
    backend_state: str | None = Field(None, description="Slurm's state of the job as last seen ('PENDING', 'RUNNING').")
    backend_state_words: str | None = Field(
        None, description="Slurm's state in words ('Slurm job 41: running on n[1-2] in partition gpu')."
    )
    # --- whether anything watches it (issue 35; core/supervision.py): set only while its supervisor is silent ---
    supervisor_silent_s: float | None = Field(
        default=None,
        description="Seconds since the job's supervisor (the worker on node 0's host, or its Slurm pool's agent) was "
        "last heard from, when longer than half the stale threshold: its row may be frozen; null otherwise.",
    )
    supervisor_silence: str | None = Field(
        default=None,
        description="The same in words ('nothing has watched this job for 3 min: the Slurm agent of pool cluster was "
        "last seen at …'); null while it is watched.",
    )
    # --- a job's own packages (issue 28): only in POST /api/jobs's answer ---
    environment_estimate: EnvironmentEstimate | None = Field(
        default=None,
        description="Only in POST /api/jobs's answer: the job's requirements ask for another torch than the "
        "server's, so it gets a full environment of its own, about this big; null otherwise.",
    )
    # --- the jobs list's metric columns (issue 24: GET /api/jobs?metrics=NAME) ---
    metrics: dict[str, float] | None = Field(
        default=None, description="The latest value of each series asked for with `metrics` (GET /api/jobs), else null."
    )

    @classmethod
    def from_row(cls, job: Job, owners: Mapping[int, str] | None = None) -> JobPublic:
        """`owners`: user id -> name, for the owner's name (api/routes/jobs.py `owner_names`)."""
        strategy, global_batch = _summary_of(job)
        return cls(
            id=_saved_id(job.id),
            name=job.name,
            status=job.status,
            strategy=strategy,
            spec=job.spec,
            attempt=job.attempt,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            worker_host=job.worker_host,
            step=_reported(job, job.step),
            total_steps=job.total_steps,
            epoch=_reported(job, job.epoch),
            samples=_reported(job, job.samples),
            samples_per_s=_finite(job.samples_per_s),
            eta_s=_finite(job.eta_s),
            latest_loss=_finite(job.latest_loss),
            error=job.error,
            failed_rank=job.failed_rank,
            exit_code=job.exit_code,
            global_batch_size=global_batch,
            priority=job.priority or 0,
            pool=job.queue,
            # A Slurm pool's job waits in Slurm's queue while `starting`: Slurm's reason, in words (worker/slurm/).
            pending_reason=job.pending_reason if job.status in (JobStatus.queued, JobStatus.starting) else None,
            placement=_public_placement(job),
            host_losses=job.host_losses or 0,
            restarts_used=job.restarts_used or 0,
            owner_id=job.owner_id,
            owner=(owners or {}).get(job.owner_id) if job.owner_id is not None else None,
            archived=bool(job.archived),
            tags=list(job.tags or []),
            note=job.note,
            backend_job_id=job.backend_job_id,
            backend_partition=job.backend_partition,
            backend_nodes=job.backend_nodes,
            backend_state=job.backend_state,
            backend_state_words=job.backend_state_words,
        )


def _public_placement(job: Job) -> JobPlacement | None:
    try:
        return read_placement(job)
    except BadPlacement:  # damaged by hand: show the job without it rather than fail the listing
        return None


def _saved_id(value: int | None) -> int:
    # A row read from the database has its id; only an unsaved one has none, and the API never shows that.
    if value is None:
        raise ValueError("a response model needs a saved row (its id is None)")
    return value


def _finite(value: float | None) -> float | None:
    # JSON has no NaN/inf (a diverged loss): show them as null rather than fail the response.
    return value if value is not None and math.isfinite(value) else None


_SUMMARIES: OrderedDict[tuple[Any, ...], tuple[str, int]] = OrderedDict()
_SUMMARIES_MAX = 4096
_summaries_lock = threading.Lock()


def _reported(job: Job, count: int) -> int | None:
    """A script job's count that nobody reported (no rankzero.progress / log, TensorBoard or console step:
    the row's 0) is null, "not reported"; the built-in trainer always reports its own."""
    return None if count == 0 and isinstance(job.spec, dict) and job.spec.get("entrypoint") else count


def _summary_of(job: Job) -> tuple[str, int]:
    """`_spec_summary`, remembered per job: a job's spec never changes, and validating it was a quarter of
    GET /jobs's time (bench/api_latency.py). Keyed by id, creation time and name, so jobs of another
    database with the same id (tests, several instances in one process) never share an entry."""
    key = (job.id, str(job.created_at), job.name)
    with _summaries_lock:
        found = _SUMMARIES.get(key)
        if found is not None:
            _SUMMARIES.move_to_end(key)
            return found
    found = _spec_summary(job.spec)
    with _summaries_lock:
        _SUMMARIES[key] = found
        while len(_SUMMARIES) > _SUMMARIES_MAX:
            _SUMMARIES.popitem(last=False)
    return found


def _spec_summary(spec: dict[str, Any]) -> tuple[str, int]:
    # Rows written by an older spec model may no longer validate; show what can be derived.
    try:
        parsed = JobSpec.model_validate(spec)
        return parsed.strategy, parsed.global_batch_size
    except Exception:
        g = 1
        for key in ("batch_size", "accumulation_steps", "nproc", "nnodes"):
            v = spec.get(key, 1)
            g *= v if isinstance(v, int) else 1
        return "unknown", g


class TransitionPublic(BaseModel):
    status: JobStatus
    at: datetime
    attempt: int
    detail: str | None

    @classmethod
    def from_row(cls, row: JobTransition) -> TransitionPublic:
        return cls(status=row.status, at=row.at, attempt=row.attempt, detail=row.detail)


class TimeBreakdown(BaseModel):
    """Where the job's wall time went, in seconds (core/time_breakdown.py says what each part holds); the
    parts sum to wall_s: created → finished, or → now while the job lives."""

    wall_s: float
    queued: float
    starting: float
    training: float
    checkpointing: float
    lost_to_restarts: float
    stopped: float


class StartEstimate(BaseModel):
    """A queued job's place in its pool's queue and when it may start (core/start_estimate.py)."""

    position: int = Field(description="1: next in its pool.")
    start_in_s: float | None = Field(description="Seconds from now; null: not known (see why).")
    start_at: datetime | None
    why: str = Field(description="What the estimate waits on, e.g. 'when job 12 ends'.")


class JobDetail(JobPublic):
    transitions: list[TransitionPublic]
    time_breakdown: TimeBreakdown | None = None
    start_estimate: StartEstimate | None = Field(None, description="Only while queued and not yet placed.")
    ranks: RanksView | None = Field(
        None, description="Every rank's progress, the straggler lines and the last stall's stuck ranks (issue 38)."
    )
    code_bytes: int | None = Field(
        None, description="The job's code bundle (spec `code`), compressed; its files: GET /api/code/{sha256}/files."
    )
    code_files: int | None = Field(None, description="Files in the job's code bundle.")


class JobPage(BaseModel):
    items: list[JobPublic]
    total: int
    limit: int
    offset: int


class MetricPointPublic(BaseModel):
    step: int
    value: float


class MetricSeries(BaseModel):
    name: str
    points: list[MetricPointPublic]
    total_points: int = Field(description="Points of this series in the requested step range, before downsampling.")
    downsampled: bool
    source: str | None = Field(
        None, description="'console' for a series read from a script's printed output; null otherwise."
    )


class MetricsResponse(BaseModel):
    job_id: int
    series: list[MetricSeries]
    console: dict[str, Any] | None = Field(
        None,
        description="A script job's console reader: lines read, series recognised and an example line, or a "
        "suggested pattern when none was; capped_streams when a per-job cap stopped it (null: not a script job).",
    )


class CheckpointPublic(BaseModel):
    id: int
    job_id: int
    step: int
    epoch: int | None
    path: str
    bytes: int
    sha256: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: Checkpoint) -> CheckpointPublic:
        return cls(
            id=_saved_id(row.id),
            job_id=row.job_id,
            step=row.step,
            epoch=row.epoch,
            path=row.path,
            bytes=row.bytes,
            sha256=row.sha256,
            created_at=row.created_at,
        )


class LogChunk(BaseModel):
    rank: int
    stream: str
    ranks: list[int] = Field(description="Ranks that have a log of this stream.")
    offset: int
    next_offset: int = Field(description="Pass as offset to read on from here (it equals the file size read so far).")
    text: str


class ConsoleLinePublic(BaseModel):
    rank: int
    stream: Literal["stdout", "stderr", "environment"] = Field(
        description="`environment`: uv's output while node 0's worker prepared the job's own packages (before "
        "its ranks started)."
    )
    time: float = Field(description="Unix time by which the line had been written (to within a worker tick).")
    text: str = Field(description="The line, without its newline.")


class ConsoleChunk(BaseModel):
    """Every rank's stdout and stderr merged in time order (core/console_log.py)."""

    lines: list[ConsoleLinePublic]
    cursor: str = Field(description="Pass back as `cursor` to read on from here (follow).")
    ranks: list[int] = Field(description="Ranks whose logs were merged.")
    more_ranks: bool = Field(description="True when the job has more logs than one merged view reads (see one rank).")


class Health(BaseModel):
    status: str
    database: str


class ErrorDetail(BaseModel):
    detail: str


class CodeBundle(BaseModel):
    """A stored code bundle (POST /api/code): refer to it in a spec as `code: "sha256:<sha256>"`."""

    sha256: str
    bytes: int = Field(description="Compressed size (the tar.gz).")
    files: int
    unpacked_bytes: int


class CodeFile(BaseModel):
    path: str
    size: int


class LeftOutFile(BaseModel):
    """A path `rankzero submit --code` left out of the upload, and the ignore file line that did (issue 27)."""

    path: str  # relative to the code folder; a folder ends with "/"
    bytes: int
    files: int
    ignore_file: str  # ".gitignore", "data/.rankzeroignore"
    line: int
    pattern: str


class LeftOutRecord(BaseModel):
    """PUT /api/code/{sha256}/left-out's answer: how many entries were kept."""

    entries: int


class CodeFiles(CodeBundle):
    paths: list[CodeFile]
    # What the upload left out, largest first (the CLI records it in the bundle; [] for other uploads).
    left_out: list[LeftOutFile] = []


class HostJob(BaseModel):
    id: int
    name: str
    node_rank: int


class HostPublic(BaseModel):
    name: str
    address: str
    pool: str
    gpus: list[str]
    cpu_slots: int
    free_gpus: list[str]
    free_slots: int
    jobs: list[HostJob]
    last_seen: datetime
    alive: bool
    draining: bool  # takes no new work: its workers are stopping, or an operator drained it
    drain_requested: bool = False  # an operator's drain (`rankzero hosts drain`), kept until undrained
    drain_note: str | None = None
    gpu_faults: dict[str, str] = {}  # GPUs out of placement (failing health checks), with why
    # Where its jobs' files go (core/artifacts/sharing.py): "shared" runs dir, "store" (uploads), "unknown".
    storage: Literal["shared", "store", "unknown"] = "unknown"
    storage_note: str = ""  # the same in words, for the Hosts page


class SlurmNodePublic(BaseModel):
    """A node of a Slurm pool's cluster, as `sinfo` last showed it (`rankzero slurm-agent` refreshes it)."""

    pool: str
    node: str
    partition: str
    state: str = Field(description="Slurm's node state: idle, mixed, allocated, drained, down, ...")
    reason: str | None = Field(None, description="Why it is drained or down, as Slurm says.")
    cpus: str
    gres: str = Field(description="Generic resources, e.g. gpu:a100:4 ('(null)': none).")
    seen_at: datetime


class PriorityChange(BaseModel):
    model_config = {"extra": "forbid"}

    priority: int = Field(ge=-1000, le=1000, description="Higher runs first.")


class StateSets(BaseModel):
    """Job states by what they mean, each in lifecycle order (core/job_state.py is their one home)."""

    all: list[JobStatus] = Field(description="Every state, in the order a job goes through them.")
    terminal: list[JobStatus] = Field(description="Finished: nothing changes any more.")
    live: list[JobStatus] = Field(description="A worker supervises the job's ranks.")
    holding: list[JobStatus] = Field(description="The job holds (or is placed on) capacity: GET /api/hosts counts it.")
    cancellable: list[JobStatus] = Field(description="POST /api/jobs/{id}/cancel acts on these.")


class PointsLimit(BaseModel):
    min: int
    max: int
    default: int


class ServerLimits(BaseModel):
    """The bounds the routes enforce (a request past them gets 422): clients size their requests by them."""

    jobs_page: int = Field(description="Most jobs per GET /api/jobs page (`limit`).")
    metric_names: int = Field(description="Most series names (`name`) per GET /api/jobs/{id}/metrics request.")
    metric_name_chars: int = Field(description="Longest series name accepted there.")
    metric_points: PointsLimit = Field(description="`max_points` of GET /api/jobs/{id}/metrics.")
    log_bytes: int = Field(description="Most bytes one GET /api/jobs/{id}/logs read returns (`limit`, `tail`).")


class Meta(BaseModel):
    """What clients would otherwise copy from the server: state sets and request limits (GET /api/meta)."""

    states: StateSets
    limits: ServerLimits


# --- a job's own packages (issue 28; worker/environments/) ---


class EnvironmentPackage(BaseModel):
    name: str
    version: str


class JobEnvironmentPublic(BaseModel):
    """A job's own Python packages: the lock its first build resolved (every node, restart and resume installs
    it), how the last preparation went, and the tail of uv's output."""

    job_id: int
    state: Literal["waiting", "resolving", "building", "ready", "failed"] = Field(
        description="waiting: the job names an environment its first start has not prepared yet."
    )
    packages: list[EnvironmentPackage]
    own_torch: bool
    python: str | None
    torch: str | None
    cached: bool
    prepare_s: float | None
    size_bytes: int | None
    error: str | None
    resolved_at: datetime | None
    log_tail: str
