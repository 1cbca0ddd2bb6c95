"""The one settings object (env prefix RANKZERO_), shared by the API, the worker and the CLI."""

from __future__ import annotations

import os
import secrets
import socket
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
MIN_TOKEN_CHARS = 32
MAX_WEBHOOKS = 10
MAX_WEBHOOK_URL_CHARS = 2000
GENERATE_TOKEN_HINT = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


def check_token_strength(token: str, source: str = "RANKZERO_API_TOKEN") -> str:
    """The token itself, or ValueError when it is too short to stand between the network and the API."""
    if len(token.strip()) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"{source} must be at least {MIN_TOKEN_CHARS} characters (got {len(token.strip())}); "
            f"generate one with: {GENERATE_TOKEN_HINT}"
        )
    return token.strip()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RANKZERO_", extra="ignore", hide_input_in_errors=True)

    data_dir: Path = Field(Path.home() / ".rankzero", description="Where the embedded defaults keep their files.")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite file in the data dir.")
    # --- PostgreSQL session limits (core/db.py; docs/reliability.md): no transaction outlives its holder ---
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
    broker_url: str | None = Field(
        None, description="Celery broker URL; default: an embedded SQLite transport in the data dir."
    )
    runs_dir: Path | None = Field(None, description="Run directories; default: <data_dir>/runs.")
    api_token: SecretStr | None = Field(
        None, description="Bearer token; default: generated once and kept in the data dir."
    )
    host: str = Field("127.0.0.1", description="API bind address.")
    allowed_hosts: str = Field(
        "",
        description="Comma-separated extra Host header names the API answers (besides localhost, 127.0.0.1, ::1 "
        "and the bind host); '*' allows any (not recommended: DNS rebinding).",
    )
    session_max_age_s: int = Field(
        12 * 3600, ge=60, le=30 * 24 * 3600, description="Lifetime of a dashboard sign-in (session cookie)."
    )
    body_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="A request body must arrive within this many seconds (else 408)."
    )
    anon_max_body_bytes: int = Field(
        16_384, ge=1024, description="Largest body accepted from a request without credentials (the sign-in form)."
    )
    anon_body_concurrency: int = Field(
        16, ge=1, le=10_000, description="Unauthenticated requests whose bodies are read at the same time."
    )
    port: int = Field(8000, ge=1, le=65535, description="API port.")
    # --- the API's connections and clients (api/connections.py, api/client_limits.py; docs/security.md) ---
    head_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="A connection must send a whole request head within this many seconds of opening (or of "
        "starting its next request); else it is closed (408).",
    )
    max_connections: int = Field(
        1000,
        ge=16,
        description="Open connections the API holds at once; past it the oldest idle one is closed (else the new "
        "one gets 503).",
    )
    max_connections_per_client: int = Field(
        64,
        ge=1,
        description="Open connections from one client address; past it that client's oldest idle one is closed "
        "(trusted proxies are exempt).",
    )
    max_streams_per_client: int = Field(
        16, ge=1, description="Live-update (SSE) streams one client may hold open at once (429 past it)."
    )
    auth_failures_per_minute: int = Field(
        10, ge=1, description="Wrong tokens one client may send per minute; past it, 429 until the minute is over."
    )
    trusted_proxies: str = Field(
        "",
        description="Comma-separated addresses of TLS/reverse proxies in front of the API whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed (client address; https makes cookies Secure). Empty: none.",
    )
    gpus: str | None = Field(
        None,
        max_length=1000,
        description="GPU indices this worker may use, e.g. '0,1'; '' or 'none' for none; default (or 'all'): "
        "every GPU it sees.",
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
    startup_timeout_s: float = Field(
        600.0,
        gt=0,
        description="With a stall_timeout_s, how long an attempt may take from launch to its first sign of life "
        "(imports, downloads, rendezvous) before it counts as hung.",
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
    redispatch_after_s: float = Field(
        300.0,
        gt=0,
        description="A queued job no worker has vouched for this long is sent to the broker again (lost messages, "
        "a flushed Redis); a repeated message is a no-op once the job is claimed.",
    )
    embedded_poll_s: float = Field(
        0.1, gt=0, le=60, description="How often a worker polls the embedded (SQLAlchemy) broker for messages."
    )
    # --- this host, as the scheduler sees it (worker/hosts.py registers it; docs/scheduler.md) ---
    host_name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._-]{1,100}$", description="This worker's host name; default: the hostname."
    )
    host_address: str | None = Field(
        None,
        max_length=255,
        description="An address the other hosts reach this one at (node 0's rendezvous); default: the hostname's.",
    )
    concurrency: int | None = Field(
        None, ge=1, le=256, description="Jobs (nodes) one worker runs at once; default: its GPUs, else its CPU slots."
    )
    cpu_slots: int | None = Field(
        None, ge=1, le=4096, description="Rank slots for CPU jobs on this host; default: its core count."
    )
    max_host_losses: int = Field(
        3,
        ge=0,
        le=1000,
        description="A job resumed this many times after losing its host (not its own fault) is failed the next time.",
    )
    scheduler_poll_s: float = Field(
        2.0,
        gt=0,
        le=60,
        description="How often the active scheduler runs a pass when nothing wakes it (a submit, a requeue or a "
        "node's end wake it at once).",
    )
    job_memory_limit_mb: int | None = Field(
        None, ge=64, description="Default memory limit of a job's processes (MiB) when its spec sets none."
    )
    # --- the job sandbox (worker/sandbox.py; docs/security.md "The job sandbox") ---
    sandbox: Literal["on", "off"] = Field(
        "on",
        description="Run every attempt in a sandbox (bubblewrap namespaces + a cgroup); 'off' runs jobs as the "
        "worker's own processes, not isolated (each job then says so), where the host allows no sandbox.",
    )
    sandbox_network: Literal["isolated", "host"] = Field(
        "isolated",
        description="A single-node job's network: 'isolated' (loopback only; a built-in data set download still "
        "gets the host's) or 'host' (every job reaches the network, and its ports are reachable).",
    )
    sandbox_pids_max: int = Field(
        16384, ge=64, description="Most processes and threads one attempt's sandbox may hold (its cgroup's pids limit)."
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
    # --- code bundles (core/bundles.py; `rankzero submit --code DIR`) ---
    allow_code_upload: bool = Field(
        True, description="Accept code bundles (POST /api/code); false refuses uploads (403)."
    )
    max_bundle_bytes: int = Field(100_000_000, ge=1024, description="Largest code bundle, compressed (tar.gz).")
    max_bundle_unpacked_bytes: int = Field(
        1_000_000_000, ge=1024, description="Largest code bundle once unpacked (sum of its file sizes)."
    )
    max_bundle_files: int = Field(100_000, ge=1, description="Most files in a code bundle.")
    max_bundle_store_bytes: int = Field(
        20_000_000_000,
        ge=1_000_000,
        description="Size cap of the bundle store (<runs>/.bundles); past it the least recently used bundles no "
        "queued or running job names are removed.",
    )
    bundle_retention_s: float = Field(
        7 * 24 * 3600.0,
        ge=0,
        description="A bundle no queued/running job uses, and none finished within this long, is removed.",
    )
    api_url: str | None = Field(
        None, description="The API's URL, for workers on hosts without the shared runs dir (they fetch bundles)."
    )
    # --- operating it: metrics, webhooks, GPU health (docs/operations.md) ---
    metrics_address: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._:\[\]-]{1,255}:[0-9]{1,5}$",
        description="host:port of a separate Prometheus scrape listener without the token (the API process "
        "serves it); unset: /metrics on the API port, token required.",
    )
    webhook_urls: str = Field(
        "",
        max_length=10_000,
        description="Comma-separated http(s) URLs every job notification is POSTed to (at most 10); empty: none.",
    )
    webhook_secret: SecretStr | None = Field(
        None, description="HMAC-SHA256 key of the X-Rankzero-Signature header; required with webhook_urls."
    )
    webhook_timeout_s: float = Field(10.0, gt=0, le=120, description="How long one webhook delivery may take.")
    webhook_max_attempts: int = Field(
        8, ge=1, le=100, description="Deliveries of one notification before it is given up (logged as failed)."
    )
    webhook_backoff_s: float = Field(
        2.0, gt=0, le=3600, description="Wait before the first retry; each next one waits twice as long (≤ 1 h)."
    )
    gpu_health: Literal["nvml", "off"] = Field(
        "nvml",
        description="Check each GPU (Xid and ECC errors, temperature) through NVML and take a failing one out of "
        "placement; 'off' trusts every GPU.",
    )
    gpu_health_file: Path | None = Field(
        None,
        description="A JSON file of GPU readings written by the site's own health check (instead of NVML): "
        '{"0": {"xid": [79], "ecc_uncorrected": 0, "temperature_c": 65}}; see docs/operations.md.',
    )
    gpu_max_temp_c: int = Field(
        90, ge=40, le=120, description="A GPU hotter than this (°C) is taken out of placement until it cools."
    )

    @field_validator("api_token")
    @classmethod
    def _strong_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            return SecretStr(check_token_strength(value.get_secret_value()))
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus_words(cls, value: str | None) -> str | None:
        # Compose passes a variable with some value or none at all: 'all' (its default there) says "unset".
        word = (value or "").strip().lower()
        return None if word == "all" else "" if word == "none" else value

    @field_validator("webhook_urls")
    @classmethod
    def _webhook_urls(cls, value: str) -> str:
        urls = [u.strip() for u in value.split(",") if u.strip()]
        if len(urls) > MAX_WEBHOOKS:
            raise ValueError(f"at most {MAX_WEBHOOKS} webhook URLs (got {len(urls)})")
        for url in urls:
            if not url.startswith(("http://", "https://")) or len(url) > MAX_WEBHOOK_URL_CHARS:
                raise ValueError(f"a webhook URL is http(s)://… of at most {MAX_WEBHOOK_URL_CHARS} characters: {url!r}")
        return ",".join(urls)

    @model_validator(mode="after")
    def _webhooks_are_signed(self) -> Settings:
        if self.webhook_urls and self.webhook_secret is None:
            raise ValueError(
                "RANKZERO_WEBHOOK_URLS needs RANKZERO_WEBHOOK_SECRET (receivers check the signature with it); "
                f"generate one with: {GENERATE_TOKEN_HINT}"
            )
        return self

    @property
    def webhook_url_list(self) -> list[str]:
        return [u for u in self.webhook_urls.split(",") if u]

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
    def resolved_host_name(self) -> str:
        return self.host_name or socket.gethostname()[:100]

    @property
    def resolved_host_address(self) -> str:
        if self.host_address:
            return self.host_address
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"

    @property
    def resolved_cpu_slots(self) -> int:
        return self.cpu_slots or os.cpu_count() or 1

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
    def trusted_proxy_hosts(self) -> frozenset[str]:
        return frozenset(h.strip() for h in self.trusted_proxies.split(",") if h.strip())

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
        env.update(
            {
                "RANKZERO_DATABASE_URL": self.resolved_database_url,
                "RANKZERO_BROKER_URL": self.resolved_broker_url,
                "RANKZERO_RUNS_DIR": str(self.resolved_runs_dir),
                "RANKZERO_API_TOKEN": self.token(),
            }
        )
        return env

    def token(self) -> str:
        """The API token: configured, else generated once and kept (mode 0600) in the data dir."""
        if self.api_token is not None:
            return self.api_token.get_secret_value()
        path = self.data_dir / "api_token"
        if not path.exists():
            self.ensure_data_dir()
            write_private(path, secrets.token_urlsafe(32))
        return check_token_strength(path.read_text(), source=str(path))

    def ensure_data_dir(self) -> Path:
        """The data dir, created owner-only (0700); an existing one is tightened to 0700 too."""
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = self.data_dir.stat()
        if info.st_mode & 0o077 and info.st_uid == os.getuid():
            self.data_dir.chmod(0o700)
        return self.data_dir


def write_private(path: Path, text: str) -> None:
    """Create `path` readable by its owner only (0600, whatever the umask) and write `text` into it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


@lru_cache
def get_settings() -> Settings:
    # Every field has a default, given positionally (Field(default, ...)), which type checkers do not read.
    return Settings()  # pyright: ignore[reportCallIssue]
