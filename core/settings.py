"""The one settings object (env prefix RANKZERO_), shared by the API, the worker and the CLI."""

from __future__ import annotations

import secrets
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RANKZERO_", extra="ignore")

    data_dir: Path = Field(Path.home() / ".rankzero", description="Where the embedded defaults keep their files.")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite file in the data dir.")
    broker_url: str | None = Field(
        None, description="Celery broker URL; default: an embedded SQLite transport in the data dir."
    )
    runs_dir: Path | None = Field(None, description="Run directories; default: <data_dir>/runs.")
    api_token: SecretStr | None = Field(
        None, description="Bearer token; default: generated once and kept in the data dir."
    )
    host: str = Field("127.0.0.1", description="API bind address.")
    port: int = Field(8000, ge=1, le=65535, description="API port.")
    gpus: str | None = Field(
        None, description="GPU indices this worker may use, e.g. '0,1'; '' for none; default: all it sees."
    )
    allowed_code: str = Field(
        "", description="Comma-separated module prefixes user code in specs may come from; empty: none."
    )
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest request body the API accepts.")
    cancel_grace_s: float = Field(20.0, gt=0, description="SIGTERM→SIGKILL grace for a cancelled job's ranks.")
    heartbeat_s: float = Field(5.0, gt=0, description="How often a worker heartbeats a running job.")
    stale_after_s: float | None = Field(
        None,
        gt=0,
        description="A live job whose heartbeat is older belongs to a dead worker; default max(30, 6 × heartbeat_s).",
    )
    poll_s: float = Field(
        0.25, gt=0, le=60, description="How often a supervisor reads events.jsonl and looks at the job row (cancel)."
    )
    queue: str = Field(
        "rankzero",
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        description="Celery queue; separate pools (or test runs) sharing a broker use their own.",
    )
    visibility_timeout_s: float = Field(
        12 * 3600.0,
        gt=0,
        description="Redis redelivers an unacked message after this long; the job claim makes redelivery harmless.",
    )
    embedded_poll_s: float = Field(
        0.1, gt=0, le=60, description="How often a worker polls the embedded (SQLAlchemy) broker for messages."
    )
    # --- what a job spec may ask for (api/submit_policy.py; docs/trainer.md "Limits") ---
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
    rank_env: str = Field(
        "", description="Comma-separated extra environment variables the ranks get (beyond the built-in allow-list)."
    )

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'rankzero.db'}"

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{self.data_dir / 'broker.db'}"

    @property
    def resolved_runs_dir(self) -> Path:
        return (self.runs_dir or self.data_dir / "runs").resolve()

    @property
    def resolved_stale_after_s(self) -> float:
        return self.stale_after_s or max(30.0, 6 * self.heartbeat_s)

    @property
    def allowed_code_prefixes(self) -> list[str]:
        return [p.strip() for p in self.allowed_code.split(",") if p.strip()]

    @property
    def resolved_datasets_dir(self) -> Path:
        return (self.datasets_dir or self.data_dir / "datasets").resolve()

    @property
    def dataset_root_dirs(self) -> list[Path]:
        """Where a spec's data paths may point: the datasets dir first (the base of relative paths), then extras."""
        extras = [Path(p.strip()).resolve() for p in self.dataset_roots.replace(",", ":").split(":") if p.strip()]
        return list(dict.fromkeys([self.resolved_datasets_dir, *extras]))

    @property
    def rank_env_names(self) -> list[str]:
        return [n.strip() for n in self.rank_env.split(",") if n.strip()]

    def to_env(self) -> dict[str, str]:
        """RANKZERO_* variables that give a child process exactly these settings (token included)."""
        env = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is not None:
                env[f"RANKZERO_{name.upper()}"] = (
                    value.get_secret_value() if isinstance(value, SecretStr) else str(value)
                )
        env.update({
            "RANKZERO_DATABASE_URL": self.resolved_database_url,
            "RANKZERO_BROKER_URL": self.resolved_broker_url,
            "RANKZERO_RUNS_DIR": str(self.resolved_runs_dir),
            "RANKZERO_API_TOKEN": self.token(),
        })  # fmt: skip
        return env

    def token(self) -> str:
        """The API token: configured, else generated once and kept (mode 0600) in the data dir."""
        if self.api_token is not None:
            return self.api_token.get_secret_value()
        path = self.data_dir / "api_token"
        if not path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(32))
        return path.read_text().strip()


@lru_cache
def get_settings() -> Settings:
    return Settings()
