"""Settings groups kept out of core/settings.py (its line limit): each a mixin `Settings` inherits, so every
field is still read from RANKZERO_<NAME> and reached as `settings.<name>`."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings


class DatabaseLimits(BaseSettings):
    """PostgreSQL session limits (core/db.py; docs/reliability.md): no transaction outlives its holder."""

    db_lock_timeout_s: float = Field(
        5.0,
        ge=0.1,
        le=600,
        description="PostgreSQL: a statement waiting this long for a row lock fails (retried, "
        "or a 503 the client retries) instead of waiting on a frozen holder.",
    )
    db_idle_in_transaction_timeout_s: float = Field(
        30.0,
        ge=1,
        le=3600,
        description="PostgreSQL: the server ends a session idle this long inside a "
        "transaction (a frozen or cut-off process), releasing its locks.",
    )
    db_statement_timeout_s: float = Field(
        60.0, ge=1, le=3600, description="PostgreSQL: a statement running this long is cancelled (migrations excepted)."
    )
    db_keepalive_idle_s: int = Field(
        10,
        ge=1,
        le=3600,
        description="PostgreSQL: TCP keepalive probes after this many idle seconds (then every "
        "5 s, 3 tries), so a connection across a cut link is found dead within about half a minute.",
    )


class SpecLimits(BaseSettings):
    """What a job spec may ask for (api/submit_policy.py; docs/trainer.md "Limits")."""

    datasets_dir: Path | None = Field(
        None,
        description="Folder data sets' root/path live under (relative ones resolve here); default <data_dir>/datasets.",
    )
    dataset_roots: str = Field(
        "", description="Extra folders data sets may come from, separated by ':' or ','; empty: only the datasets dir."
    )
    max_cpu_ranks: int | None = Field(
        None, ge=1, description="Most ranks (nproc) of a job that runs on CPU; default: the API host's CPU count."
    )
    max_num_workers: int = Field(8, ge=0, description="Most DataLoader workers per rank (data.num_workers).")
    max_global_batch: int = Field(1_000_000, ge=1, description="Largest global batch (batch × accumulation × ranks).")
    max_model_params: int = Field(
        100_000_000, ge=1, description="Most parameters of a built-in model (from its args, checked at submit)."
    )
    max_data_elements: int = Field(
        50_000_000, ge=1, description="Most numbers a generated (synthetic / fake) data set holds: samples × size."
    )
    max_active_jobs: int = Field(
        100, ge=1, description="Most jobs queued or running at once; a submit past it is refused (429)."
    )


class Retention(BaseSettings):
    """What old data the retention pass thins or deletes (core/retention.py; docs/performance.md "Retention")."""

    retention_metrics_after_days: float = Field(
        30.0,
        ge=0,
        description="A job ended this many days ago keeps only the raw metric points its charts need (each "
        "16-step bucket's min and max, each series' first and last); its rollups stay whole. 0: never thin.",
    )
    retention_logs_after_days: float = Field(
        90.0,
        ge=0,
        description="A job ended this many days ago has its rank logs cut to their last "
        "RANKZERO_RETENTION_LOG_TAIL_KB and its event rows (audit excepted) kept. 0: never trim.",
    )
    retention_log_tail_kb: int = Field(
        256, ge=1, le=1 << 20, description="What a trimmed rank log keeps: its last this many KiB."
    )
    retention_interval_s: float = Field(
        3600.0, ge=10, le=7 * 86400, description="How often the scheduler leader runs the retention pass."
    )
