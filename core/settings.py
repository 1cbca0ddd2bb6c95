"""The one settings object (env prefix RANKZERO_), shared by the API, the worker and the CLI."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.settings_groups import DatabaseLimits, Retention, SpecLimits
from core.settings_slurm import SLURM_ALLOWED_OPTIONS, SlurmPoolSettings  # noqa: F401 (SLURM_ALLOWED_OPTIONS: its old home)

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


class Settings(DatabaseLimits, SpecLimits, Retention, SlurmPoolSettings, BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RANKZERO_", extra="ignore", hide_input_in_errors=True)

    data_dir: Path = Field(Path.home() / ".rankzero", description="Where the embedded defaults keep their files.")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite file in the data dir.")
    broker_url: str | None = Field(
        None, description="Celery broker URL; default: an embedded SQLite transport in the data dir."
    )
    runs_dir: Path | None = Field(None, description="Run directories; default: <data_dir>/runs.")
    api_token: SecretStr | None = Field(
        None, description="Bearer token; default: generated once and kept in the data dir."
    )
    worker_token: SecretStr | None = Field(
        None,
        description="A worker host's own credential (`rankzero workers add HOST`, issue 34): what it sends the API to "
        "ship and fetch files; default: the server token (an embedded, single-host set-up).",
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
    finished_linger_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="How long a job's processes may outlive the built-in trainer's `finished` (its final checkpoint "
        "and record are on disk) before the worker stops them and records the job as succeeded: a rank or "
        "torchrun hung in teardown never holds a finished job, or its GPUs, for long.",
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
        30.0,  # issue 20: 300 left a host idle 5 min after a Redis flush; a live host vouches within a poll
        gt=0,
        le=3600,
        description="A placed job no worker has vouched for this long is placed and sent again (lost messages, "
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
    # Issue 34: a root worker's jobs run as these ids (worker/sandbox_ids.py); a non-root worker's as its own
    # uid in a user namespace. Pick ids no account uses (65533: reserved by Debian's policy, and not 65534,
    # `nobody`, which ext4's reserved blocks may name, resuid=65534).
    sandbox_uid: int = Field(
        65533,
        ge=1,
        le=2**31 - 2,
        description="The uid a root worker's jobs run as (never 0; no account should use it).",
    )
    sandbox_gid: int = Field(
        65533,
        ge=1,
        le=2**31 - 2,
        description="The gid a root worker's jobs run as; their bundle, environment and data sets are made readable "
        "to this group (never 0; no other account should be in it).",
    )
    job_memory_fraction: float = Field(
        0.75,
        gt=0,
        le=1,
        description="Every job's memory limit when neither its spec nor RANKZERO_JOB_MEMORY_LIMIT_MB sets one, and the "
        "most either may set: this fraction of the host's memory (its /tmp and /dev/shm count).",
    )
    # --- a job's quotas (issue 19 items 4, 6: worker/quota.py, worker/bundle_cache.py; docs/security.md "Quotas") ---
    job_disk_limit_mb: int = Field(
        51_200,
        ge=0,
        le=1 << 30,
        description="Default disk limit of a job's run dir (MiB) when its spec sets no disk_limit_mb; 0: no limit.",
    )
    job_max_series: int = Field(
        2_000,
        ge=10,
        le=1_000_000,
        description="Most distinct metric series one job stores; later series are counted, not stored (the job "
        "page says so).",
    )
    job_max_points_per_series: int = Field(
        2_000_000,
        ge=100,
        le=1_000_000_000,
        description="Most points one metric series of a job stores; later points are counted, not stored.",
    )
    bundle_cache_max_bytes: int = Field(
        20_000_000_000,
        ge=1_000_000,
        le=1 << 50,
        description="Size cap of this host's unpacked-bundle cache; past it the least recently used bundles no "
        "running attempt uses are removed.",
    )
    # --- team (issue 23): members' default quotas and fair share (core/quotas.py, core/fair_share.py) ---
    quota_gpus: int = Field(
        8, ge=0, le=100_000, description="A member's default quota: most GPUs her jobs hold at once (admins set each)."
    )
    quota_cpu_slots: int = Field(
        64, ge=0, le=1_000_000, description="A member's default quota: most CPU rank slots her jobs hold at once."
    )
    quota_queued: int = Field(
        100, ge=0, le=100_000, description="A member's default quota: most jobs she has queued at once."
    )
    fair_share_half_life_s: float = Field(
        3600.0,
        ge=1.0,
        le=90 * 24 * 3600.0,
        description="Fair share: a user's recorded usage (GPU- or slot-seconds) halves every this many seconds.",
    )
    rank_env: str = Field(
        "", description="Comma-separated extra environment variables the ranks get (beyond the built-in allow-list)."
    )
    # --- code bundles (core/bundles.py; `rankzero submit --code DIR`) ---
    allow_code_upload: bool = Field(
        True, description="Accept code bundles (POST /api/code); false refuses uploads (403)."
    )
    code_visibility: Literal["team", "owner"] = Field(
        "team",
        description="Who reads a code bundle (its archive and file list): 'team', every signed-in user; 'owner', "
        "its uploaders, the owners of jobs that run it, admins and worker hosts (issue 37; docs/security.md).",
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
    # --- the artifact store and outputs (issue 22 part B; core/artifacts/, docs/storage.md) ---
    artifact_store: str = Field(
        "",
        max_length=600,
        pattern=r"^(|s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]{0,500})?)$",
        description="Where checkpoints and outputs of hosts without the API's runs dir go: empty (the API's runs "
        "dir) or s3://bucket/prefix (any S3-compatible store; see the RANKZERO_S3_* settings).",
    )
    s3_endpoint_url: str | None = Field(
        None, max_length=500, pattern=r"^https?://\S+$", description="S3 endpoint (MinIO, Ceph…); unset: AWS."
    )
    s3_region: str = Field("us-east-1", pattern=r"^[a-z0-9-]{1,40}$", description="S3 region.")
    s3_access_key_id: str | None = Field(
        None, max_length=200, description="S3 access key; unset: boto3's chain (env, ~/.aws, role)."
    )
    s3_secret_access_key: SecretStr | None = Field(None, description="S3 secret key (with s3_access_key_id).")
    artifact_max_file_bytes: int = Field(
        200_000_000_000, ge=1024, le=5_000_000_000_000, description="Largest file a worker may upload to the store."
    )
    ship_every_s: float = Field(
        2.0, ge=0.1, le=600, description="How often a worker that uploads to the store ships what its jobs wrote."
    )
    outputs_max_files: int = Field(
        10_000, ge=1, le=1_000_000, description="Most output files listed (and archived) for one job."
    )
    outputs_max_archive_bytes: int = Field(
        20_000_000_000, ge=1024, description="Largest folder (sum of file sizes) downloadable as one archive."
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
    webhook_allow_private: bool = Field(
        False,
        description="Let users' own webhooks reach loopback, link-local, private and metadata addresses (a "
        "receiver on this network); off, such a URL is refused when registered and when delivered to.",
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

    # --- a job's own Python packages (worker/environments/; docs/your-code.md "Bring your own packages") ---
    environments: Literal["on", "off"] = Field(
        "on",
        description="Build the Python packages a job names (spec `environment`); 'off' fails such a job at its start "
        "saying so (an admin's switch: jobs then import only what the service has).",
    )
    environment_dir: Path | None = Field(
        None, description="This host's cache of built environments; default <data_dir>/environments."
    )
    environment_index_url: str | None = Field(
        None,
        max_length=2000,
        pattern=r"^(https?|file)://\S+$",
        description="The package index environments resolve from (uv's --index-url); default: PyPI.",
    )
    environment_extra_index_urls: str = Field(
        "",
        max_length=10_000,
        description="Comma-separated extra package indexes (uv's --extra-index-url), e.g. PyTorch's wheel index.",
    )
    environment_find_links: Path | None = Field(
        None, description="A folder of wheels offered beside the index (uv's --find-links), e.g. an air-gapped mirror."
    )
    environment_offline: bool = Field(
        False,
        description="Resolve and install from environment_find_links only: no index, no network (air-gapped hosts).",
    )
    environment_cache_max_bytes: int = Field(
        50_000_000_000,
        ge=100_000_000,
        description="Size cap of this host's environment cache; past it the least recently used environments no "
        "live job uses are removed.",
    )
    environment_build_timeout_s: float = Field(
        1800.0, ge=10, le=24 * 3600, description="A resolution or build taking longer fails the job saying so."
    )
    environment_reuse_s: float = Field(
        24 * 3600.0,
        ge=0,
        le=365 * 24 * 3600,
        description="A new job whose requirements another job resolved this recently takes that job's lock (no "
        "resolution, a cached start); 0 resolves every new job afresh.",
    )

    @field_validator("environment_extra_index_urls")
    @classmethod
    def _index_urls(cls, value: str) -> str:
        urls = [u.strip() for u in value.split(",") if u.strip()]
        for url in urls:
            if not url.startswith(("http://", "https://", "file://")) or any(c.isspace() for c in url):
                raise ValueError(f"an extra index URL is http(s):// or file:// without spaces: {url!r}")
        return ",".join(urls)

    @model_validator(mode="after")
    def _offline_needs_wheels(self) -> Settings:
        if self.environment_offline and self.environment_find_links is None:
            raise ValueError(
                "RANKZERO_ENVIRONMENT_OFFLINE needs RANKZERO_ENVIRONMENT_FIND_LINKS "
                "(the folder of wheels to install from)"
            )
        return self

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
    def resolved_environment_dir(self) -> Path:
        return (self.environment_dir or self.data_dir / "environments").resolve()

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
        if not path.exists():  # written whole, then linked: API processes sharing the data dir read one token
            self.ensure_data_dir()
            draft = path.with_name(f".api_token.{secrets.token_hex(6)}")
            write_private(draft, secrets.token_urlsafe(32))
            with contextlib.suppress(FileExistsError):  # another process linked its token first: read that one
                os.link(draft, path)
            draft.unlink()
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
