"""The database schema: the one definition of every table (the worker imports it; Alembic migrates it).

The job row, not the broker message, is the truth about a job: its status, attempt, the host and
process running it, its heartbeat and its progress all live here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class JobStatus(str, Enum):
    queued = "queued"
    starting = "starting"
    running = "running"
    cancelling = "cancelling"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled})


def _ts(**kw: Any) -> Any:
    return Field(default=None, sa_column=Column(DateTime(timezone=True), **kw))


class Job(SQLModel, table=True):
    __tablename__ = "jobs"  # pyright: ignore[reportAssignmentType]  (sqlmodel declares it declared_attr; a str is what it takes)
    __table_args__ = (UniqueConstraint("idempotency_key", name="uq_jobs_idempotency_key"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, max_length=100)
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    status: JobStatus = Field(default=JobStatus.queued, index=True)
    attempt: int = 0  # 0 until first claimed; each (re)start increments it
    run_dir: str | None = None

    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
    started_at: datetime | None = _ts()  # first transition to running
    finished_at: datetime | None = _ts()  # terminal transition

    worker_host: str | None = None
    pid: int | None = None  # torchrun's pid (leader of its process group)
    # While live: the supervisor's heartbeat (stale → its host was lost: worker/recover.py).
    heartbeat_at: datetime | None = _ts()
    # While queued and placed: when the scheduler placed it, or node 0's worker, waiting for its GPUs, last
    # vouched for it; stale → its host never started it, and it is placed again (worker/recover.py).
    vouched_at: datetime | None = _ts()
    queue: str | None = Field(default=None, max_length=100)  # the pool (Celery queue) it was submitted to
    idempotency_key: str | None = Field(default=None, max_length=200)  # POST /jobs retries (unique)

    # --- scheduling (worker/scheduler.py decides, core/placement.py computes) ---
    priority: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0", index=True))
    # Where the scheduler put the job: {"nodes": [{"host", "node_rank", "gpus", "slots"}], "nproc",
    # "accumulation_steps"}; set while queued-and-placed and while live, cleared when it leaves them.
    placement: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    placement_id: str | None = Field(default=None, max_length=40)  # fences node messages to one placement
    rendezvous: str | None = Field(default=None, max_length=300)  # node 0's c10d endpoint, host:port
    pending_reason: str | None = Field(default=None, sa_column=Column(Text))  # why a queued job waits
    preempt_for: int | None = None  # set by the scheduler: stop (checkpoint, requeue) to make room for that job
    host_losses: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    restarts_used: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))

    step: int = 0
    total_steps: int | None = None
    epoch: int = 0
    samples: int = 0
    samples_per_s: float | None = None
    eta_s: float | None = None
    latest_loss: float | None = None
    ingested_seq: int = Field(default=-1, sa_column=Column(BigInteger, nullable=False, server_default="-1"))

    error: str | None = Field(default=None, sa_column=Column(Text))
    failed_rank: int | None = None
    exit_code: int | None = None

    # --- a job run by an external backend (core/backends.py; Slurm: worker/slurm/, docs/slurm.md) ---
    backend_job_id: str | None = Field(default=None, max_length=64)  # the Slurm job id while handed to Slurm
    backend_first_attempt: int | None = None  # the attempt its backend's restart 0 runs as (restart r: + r)
    # As the backend's agent last saw it (migration 0013_backend_status): a Slurm job's partition, node list
    # (Slurm's compressed form, "n[1-2]"), state ("RUNNING") and that state in rankzero's words.
    backend_partition: str | None = Field(default=None, max_length=100)
    backend_nodes: str | None = Field(default=None, sa_column=Column(Text))
    backend_state: str | None = Field(default=None, max_length=40)
    backend_state_words: str | None = Field(default=None, sa_column=Column(Text))

    # --- team (issue 23): who submitted it, and housekeeping ---
    owner_id: int | None = Field(default=None, foreign_key="users.id", index=True)  # None only for rows of old tests
    archived: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false(), index=True))
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))
    note: str | None = Field(default=None, sa_column=Column(Text))
    # Where its wall time went (core/time_breakdown.py PARTS → seconds), written at its terminal transition
    # (migration 0015_job_time_breakdown); None while it lives.
    time_breakdown: dict[str, float] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # Every rank's progress as node 0's worker last read it (core/rank_health.py; migration 0017_job_ranks):
    # {"attempt", "at", "ranks": [...]}; and the last stall's account: the ranks it blamed and their stacks.
    rank_progress: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    stuck_ranks: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))


class JobTransition(SQLModel, table=True):
    """One row per status change, with its time: the job's timeline."""

    __tablename__ = "job_transitions"  # pyright: ignore[reportAssignmentType]  (sqlmodel declares it declared_attr; a str is what it takes)

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="jobs.id", index=True, ondelete="CASCADE")
    status: JobStatus
    at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
    attempt: int = 0
    detail: str | None = Field(default=None, sa_column=Column(Text))


class MetricPoint(SQLModel, table=True):
    """One `metric` event. Unique on (job, seq) so re-reading events.jsonl never duplicates."""

    __tablename__ = "metric_points"  # pyright: ignore[reportAssignmentType]  (sqlmodel declares it declared_attr; a str is what it takes)
    __table_args__ = (
        UniqueConstraint("job_id", "seq", name="uq_metric_points_job_seq"),
        Index("ix_metric_points_job_name_step", "job_id", "name", "step"),
    )

    # BIGINT on PostgreSQL, INTEGER (the rowid alias, so it autoincrements) on SQLite.
    id: int | None = Field(
        default=None,
        sa_column=Column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    )
    job_id: int = Field(foreign_key="jobs.id", ondelete="CASCADE")
    seq: int = Field(sa_column=Column(BigInteger, nullable=False))
    step: int = Field(sa_column=Column(BigInteger, nullable=False))
    name: str = Field(max_length=200)
    value: float
    time: float  # unix seconds, from the event


class Checkpoint(SQLModel, table=True):
    __tablename__ = "checkpoints"  # pyright: ignore[reportAssignmentType]  (sqlmodel declares it declared_attr; a str is what it takes)
    __table_args__ = (UniqueConstraint("job_id", "path", name="uq_checkpoints_job_path"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="jobs.id", index=True, ondelete="CASCADE")
    step: int
    epoch: int | None = None
    path: str  # relative to the job's run dir
    bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    sha256: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))


class MetricRollup(SQLModel, table=True):
    """Min/max summaries of metric points over aligned step buckets, at a few widths (a pyramid).

    Lets GET /jobs/{id}/metrics downsample a million-point series by reading a few thousand
    summary rows instead of scanning every point. Maintained incrementally by
    `core.metric_rollup.refresh` from the points past `MetricRollupMark.seq`.
    Bucket k of width w covers steps [k*w, (k+1)*w).
    """

    __tablename__ = "metric_rollups"  # pyright: ignore[reportAssignmentType]  (sqlmodel declares it declared_attr; a str is what it takes)

    job_id: int = Field(foreign_key="jobs.id", primary_key=True, ondelete="CASCADE")
    name: str = Field(max_length=200, primary_key=True)
    width: int = Field(primary_key=True)
    bucket: int = Field(sa_column=Column(BigInteger, primary_key=True))
    n: int = Field(sa_column=Column(BigInteger, nullable=False))
    min_value: float
    min_step: int = Field(sa_column=Column(BigInteger, nullable=False))
    max_value: float
    max_step: int = Field(sa_column=Column(BigInteger, nullable=False))


class MetricRollupMark(SQLModel, table=True):
    """The highest metric-point seq of a job already folded into metric_rollups."""

    __tablename__ = "metric_rollup_marks"  # pyright: ignore[reportAssignmentType]  (sqlmodel declares it declared_attr; a str is what it takes)

    job_id: int = Field(foreign_key="jobs.id", primary_key=True, ondelete="CASCADE")
    seq: int = Field(default=-1, sa_column=Column(BigInteger, nullable=False))


class Host(SQLModel, table=True):
    """A machine that runs jobs: registered and heartbeaten by its workers (worker/hosts.py).

    Several workers on one machine share its row (same name); the scheduler places nodes of jobs
    on hosts whose heartbeat is fresh and sends them on the host's own Celery queue."""

    __tablename__ = "hosts"  # pyright: ignore[reportAssignmentType]  (sqlmodel declares it declared_attr; a str is what it takes)

    name: str = Field(primary_key=True, max_length=100)
    address: str = Field(max_length=255)  # reachable by the other hosts (node 0's rendezvous endpoint)
    pool: str = Field(max_length=100)  # the pool (job.queue) it serves
    gpus: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    cpu_slots: int = 1  # rank slots for CPU jobs
    storage_id: str = Field(max_length=64)  # the runs dir it sees (multi-node needs one shared by its hosts)
    draining: bool = False
    # An operator's drain (`rankzero hosts drain`): survives the worker's restarts, unlike `draining`.
    drain_requested: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    drain_note: str | None = Field(default=None, sa_column=Column(Text))
    # GPUs the worker's health check took out of placement, with why: {"0": "Xid 79 ..."} (worker/gpu_health.py).
    gpu_faults: dict[str, str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # Whether its jobs' files reach the API: "shared" runs dir, "store" (uploads), "unknown" (core/artifacts/).
    storage: str = Field(default="unknown", sa_column=Column(String(16), nullable=False, server_default="unknown"))
    registered_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
    heartbeat_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))


class SlurmNode(SQLModel, table=True):
    """A node of a Slurm pool's cluster as `sinfo` last showed it (one row per node and partition), written by
    `rankzero slurm-agent` (worker/slurm/agent.py) for the hosts page: rankzero places nothing on it."""

    __tablename__ = "slurm_nodes"  # pyright: ignore[reportAssignmentType]

    pool: str = Field(primary_key=True, max_length=100)
    node: str = Field(primary_key=True, max_length=200)
    partition: str = Field(primary_key=True, max_length=100)
    state: str = Field(max_length=100)  # idle, mixed, allocated, drained, down, ...
    reason: str | None = Field(default=None, sa_column=Column(Text))  # why drained or down, as Slurm says
    cpus: str = Field(default="", max_length=40)
    gres: str = Field(default="", max_length=400)  # e.g. gpu:a100:4
    seen_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))


class Pool(SQLModel, table=True):
    """A Slurm pool, registered by its `rankzero slurm-agent` each period it asks Slurm for the nodes (issue 35):
    the API takes jobs for it with nothing set on the API. Hosts pools need no row: a pool exists while some
    host registered for it (`hosts.pool`)."""

    __tablename__ = "pools"  # pyright: ignore[reportAssignmentType]

    name: str = Field(primary_key=True, max_length=100)
    backend: str = Field(max_length=16)  # core/backends.py BackendKind: "slurm"
    partition: str | None = Field(default=None, max_length=100)  # where its jobs go unless their spec names one
    seen_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))


class SchedulerLease(SQLModel, table=True):
    """Who schedules (one row): a lease the active scheduler renews every pass (worker/scheduler.py).

    A lease, not a held lock: a leader that is frozen (SIGSTOP, a stuck disk) or partitioned keeps a
    lock forever, but stops renewing, so another worker takes over once `renewed_at` is stale."""

    __tablename__ = "scheduler_lease"  # pyright: ignore[reportAssignmentType]  (sqlmodel declares it declared_attr; a str is what it takes)

    id: int = Field(default=1, primary_key=True)
    holder: str = Field(max_length=200)  # "pid=<pid> host=<host> <random>": one candidate thread
    renewed_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))


class NotificationEvent(SQLModel, table=True):
    """The outbox: one row per job transition worth telling (core/notify.py), written in the transition's
    own transaction, so no event is lost and none is sent for a transition that rolled back. A sender
    (worker/notify_sender.py) turns each into one delivery per configured webhook."""

    __tablename__ = "notification_events"  # pyright: ignore[reportAssignmentType]  (SQLModel declares it an attr)

    id: int | None = Field(default=None, primary_key=True)
    # A job's transition, or (job_id None) a sweep's end: sweep_id set, kind "finished" or "cancelled" (issue 37).
    job_id: int | None = Field(default=None, foreign_key="jobs.id", index=True, ondelete="CASCADE")
    sweep_id: int | None = Field(default=None, foreign_key="sweeps.id", index=True, ondelete="CASCADE")
    kind: str = Field(max_length=40)  # succeeded, failed, cancelled, preempted, host_lost, requeued
    status: str = Field(max_length=20)  # the JobStatus it moved to
    attempt: int = 0
    detail: str | None = Field(default=None, sa_column=Column(Text))
    at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
    fanned_out: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=false(), index=True)
    )


class NotificationDelivery(SQLModel, table=True):
    """One event to one webhook: its attempts, the answer last seen, and when to try again (the delivery log)."""

    __tablename__ = "notification_deliveries"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ix_notification_deliveries_state_next", "state", "next_at"),)

    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(foreign_key="notification_events.id", index=True, ondelete="CASCADE")
    job_id: int | None = Field(default=None, foreign_key="jobs.id", index=True, ondelete="CASCADE")
    # A user's own webhook (its URL, secret and owner); None: one of the server's (RANKZERO_WEBHOOK_URLS).
    webhook_id: int | None = Field(default=None, foreign_key="webhooks.id", index=True, ondelete="CASCADE")
    url: str = Field(max_length=2000)
    state: str = Field(default="pending", max_length=20)  # pending, delivered, failed (gave up)
    attempts: int = 0
    next_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
    last_status: int | None = None  # the receiver's HTTP status, None when it never answered
    last_error: str | None = Field(default=None, sa_column=Column(Text))
    delivered_at: datetime | None = _ts()
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))


class Webhook(SQLModel, table=True):
    """A user's own webhook (issue 37): her jobs' and sweeps' events are POSTed to `url`, signed with `secret`
    (core/webhooks.py; worker/notify_sender.py delivers)."""

    __tablename__ = "webhooks"  # pyright: ignore[reportAssignmentType]

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True, ondelete="CASCADE")
    url: str = Field(max_length=2000)
    secret: str = Field(max_length=100)  # HMAC-SHA256 key of its X-Rankzero-Signature; shown once, at creation
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))


# --- team (issue 23): users, their tokens and dashboard sessions, quotas, fair-share usage, audit log ---


class User(SQLModel, table=True):
    """A person (or service) with a role: admin, member or viewer. Id 1 is the first admin, whom the
    server's own token (RANKZERO_API_TOKEN / <data dir>/api_token) signs in as."""

    __tablename__ = "users"  # pyright: ignore[reportAssignmentType]

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=40, unique=True, index=True)
    role: str = Field(max_length=10)  # admin, member, viewer (core/users.py ROLES)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
    # Quotas; None: the member default of the settings (RANKZERO_QUOTA_*). core/quotas.py reads them.
    max_gpus: int | None = None
    max_cpu_slots: int | None = None
    max_queued: int | None = None
    max_priority: int | None = None  # her priority ceiling (issue 34); None: core/quotas.py DEFAULT_MAX_PRIORITY


class ApiToken(SQLModel, table=True):
    """A user's bearer token, stored only as its SHA-256 (tokens are 256 random bits: no salt or
    slow hash needed). Revoked tokens stay (revoked_at set) so the audit log keeps naming them."""

    __tablename__ = "api_tokens"  # pyright: ignore[reportAssignmentType]

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="users.id", index=True, ondelete="CASCADE")
    name: str = Field(max_length=60)
    token_sha256: str = Field(max_length=64, unique=True, index=True)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
    last_used_at: datetime | None = _ts()
    revoked_at: datetime | None = _ts()


class WebSession(SQLModel, table=True):
    """One dashboard sign-in. The cookie names it (signed); signing out deletes this row only, and
    revoking the token it was opened with deletes every row of that token."""

    __tablename__ = "web_sessions"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True, max_length=64)  # random; the cookie carries it signed
    user_id: int = Field(foreign_key="users.id", index=True, ondelete="CASCADE")
    token_id: int | None = Field(default=None, foreign_key="api_tokens.id", index=True, ondelete="CASCADE")
    csrf: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))


class UserUsage(SQLModel, table=True):
    """Fair share: a user's decayed usage (GPU- or slot-seconds) as of `as_of` (core/fair_share.py).
    Updated incrementally by the scheduler each pass, never recomputed from history."""

    __tablename__ = "user_usage"  # pyright: ignore[reportAssignmentType]

    user_id: int = Field(foreign_key="users.id", primary_key=True, ondelete="CASCADE")
    usage: float = 0.0  # unit-seconds (GPUs + CPU slots held × seconds), decayed to `as_of`
    as_of: float = 0.0  # unix seconds
    rate: float = 0.0  # units the user's jobs held as of `as_of`: charged until the next update


class AuditEvent(SQLModel, table=True):
    """Who did what, when: one row per state-changing request (core/audit.py)."""

    __tablename__ = "audit_events"  # pyright: ignore[reportAssignmentType]

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False, index=True))
    actor_id: int | None = Field(default=None, index=True)  # no FK: the log outlives a deleted user
    actor: str = Field(max_length=40)  # the user's name at the time
    action: str = Field(max_length=40, index=True)  # job.submit, job.cancel, user.add, token.revoke, host.drain…
    target: str = Field(max_length=200)  # "job 12", "user alice", "host gpu-1"
    detail: str | None = Field(default=None, sa_column=Column(Text))


# --- sweeps (issue 24): a hyperparameter search whose trials are ordinary jobs (core/sweeps/) ---


class Sweep(SQLModel, table=True):
    """One search. `spec` is the validated SweepSpec (core/sweeps/space.py); the driver
    (core/sweeps/driver.py, each scheduler pass) creates its trials as jobs until `trials` are made
    and ended. status: running, paused (no new trial), cancelled, finished."""

    __tablename__ = "sweeps"  # pyright: ignore[reportAssignmentType]

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=100, index=True)
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    status: str = Field(default="running", max_length=20, index=True)
    queue: str = Field(max_length=100)  # the pool its trials are submitted to
    owner_id: int | None = Field(default=None, foreign_key="users.id", index=True)  # whose jobs its trials are
    note: str | None = Field(default=None, sa_column=Column(Text))  # why it ended, or the last problem
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
    finished_at: datetime | None = _ts()


class SweepTrial(SQLModel, table=True):
    """A trial: the link from a sweep to the job that runs it, its values, and what only the sweep knows
    (pruned, and the pruner's rung records, kept so the rebuilt Optuna study judges as the last did)."""

    __tablename__ = "sweep_trials"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (UniqueConstraint("sweep_id", "number", name="uq_sweep_trials_sweep_number"),)

    id: int | None = Field(default=None, primary_key=True)
    sweep_id: int = Field(foreign_key="sweeps.id", index=True, ondelete="CASCADE")
    number: int  # 0, 1, … in the order the trials were made
    job_id: int = Field(foreign_key="jobs.id", unique=True, ondelete="CASCADE")
    params: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    pruned: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    pruned_step: int | None = None
    rungs: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class JobEnvironment(SQLModel, table=True):
    """A job's own Python packages (spec `environment`; worker/environments/): the lock its first build resolved,
    which every node, restart and resume of it installs, and how the last preparation went."""

    __tablename__ = "job_environments"  # pyright: ignore[reportAssignmentType]  (SQLModel declares it an attr)

    job_id: int = Field(foreign_key="jobs.id", primary_key=True, ondelete="CASCADE")
    input_hash: str = Field(max_length=64, index=True)  # sha256 of the requirements as given, normalised
    lock: str | None = Field(default=None, sa_column=Column(Text))  # `name==version` lines, sorted
    key: str | None = Field(default=None, max_length=64)  # the cache entry: lock, Python, the service's torch
    packages: list[dict[str, str]] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    own_torch: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    python: str | None = Field(default=None, max_length=40)
    torch: str | None = Field(default=None, max_length=60)
    state: str = Field(default="resolving", max_length=20)  # resolving, building, ready, failed
    cached: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    prepare_s: float | None = None  # the last preparation's duration (resolve + build, or a cache hit)
    size_bytes: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    error: str | None = Field(default=None, sa_column=Column(Text))
    resolved_at: datetime | None = _ts()
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
