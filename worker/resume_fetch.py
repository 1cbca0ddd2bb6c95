"""The checkpoint a job resumes from (spec `resume_from`: `rankzero resume`, a clone, a sweep's extend-best),
provided on this host before any rank starts (docs/storage.md "Resume on any host").

The spec names it by its key (`job_<id>/checkpoints/step_<N>.pt`, core/resume_source.py), which means the same
file on every host: this worker looks for it in its own runs dir and, when it is not there (a host with a runs
dir of its own, or an S3 store), fetches it from the API's artifact store into the same place, checked against
the sha256 the database recorded when it was written. When it cannot, the job fails before its ranks start
with the sentence `core.resume_source.decide` chose: a job never trains from scratch believing it resumed.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
from pathlib import Path
from urllib.parse import quote

import httpx
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from core import artifacts, resume_source, run_files
from core.artifacts import keys
from core.resume_source import Fetched, Local
from core.settings import Settings
from core.tables import Checkpoint

log = logging.getLogger("rankzero.worker")
SHA_HEADER = "X-Content-SHA256"
TIMEOUT_S = 60.0  # per read: a large checkpoint streams for as long as it takes


class ResumeUnavailable(RuntimeError):
    """The checkpoint cannot be provided on this host; the message says why and what to do."""


def provide(engine: Engine, settings: Settings, given: str) -> Path:
    """This host's path of checkpoint `given` (a key, or an older spec's absolute path in the runs dir), fetched
    from the artifact store when it is not here; ResumeUnavailable saying why it cannot be."""
    runs = settings.resolved_runs_dir.resolve()
    try:
        key = resume_source.resume_key(given, settings.resolved_runs_dir, runs)
    except keys.BadKey as exc:
        raise ResumeUnavailable(f"resume_from {given[:200]!r} cannot be found on this host: {exc}") from None
    owned = resume_source.key_job(key)
    recorded = _recorded_sha(engine, *owned) if owned is not None else None
    target = runs / key
    local = _local(target, runs, recorded)
    can_fetch = bool(settings.api_url and artifacts.worker_token(settings))
    decision = resume_source.decide(key, local, in_store=owned is not None, can_fetch=can_fetch, fetched="not tried")
    if decision.action == "fetch" and owned is not None:
        fetched, detail = _fetch(settings, owned[0], owned[1], target, runs, recorded)
        decision = resume_source.decide(key, local, in_store=True, can_fetch=True, fetched=fetched, detail=detail)
        if fetched == "ok":
            log.info("fetched %s from the artifact store to resume from", key)
    if decision.action != "use":
        raise ResumeUnavailable(decision.reason)
    return target


def provide_in_spec(engine: Engine, settings: Settings, spec: dict[str, object], *, optional: bool = False) -> None:
    """Point the ranks' spec (`resume_from`, when set) at this host's copy of the checkpoint (the built-in
    trainer loads the path it names; a script gets it as RANKZERO_RESUME_FROM). `optional`: the job has a
    checkpoint of its own, which a script's `rankzero.load_checkpoint()` prefers: one that cannot be provided
    is dropped (logged) rather than failing the job."""
    given = spec.get("resume_from")
    if not isinstance(given, str) or not given:
        return
    try:
        spec["resume_from"] = str(provide(engine, settings, given))
    except ResumeUnavailable as exc:
        if not optional:
            raise
        log.warning("resume_from not provided (the job resumes from its own checkpoint): %s", exc)
        spec["resume_from"] = None


def _recorded_sha(engine: Engine, job_id: int, relative: str) -> str | None:
    with Session(engine) as s:
        row = s.exec(select(Checkpoint).where(col(Checkpoint.job_id) == job_id, col(Checkpoint.path) == relative))
        found = row.first()
    return found.sha256 if found is not None else None


def _local(target: Path, runs: Path, recorded: str | None) -> Local:
    """This host's copy: read with no link followed below the runs dir (a job may have put one in its run dir)."""
    try:
        digest = run_files.sha256(target, runs) if recorded is not None else None
        if recorded is None:
            with run_files.open_file(target, "rb", runs):
                pass
    except OSError:
        return "absent"
    if recorded is None:
        return "unverified"
    return "intact" if digest == recorded else "differs"


def _fetch(
    settings: Settings, job_id: int, relative: str, target: Path, runs: Path, recorded: str | None
) -> tuple[Fetched, str]:
    """Download the store's copy beside `target` and move it there only when its sha256 is the recorded one
    (else the one the store answers with); no link the job made is followed on the way."""
    token = artifacts.worker_token(settings) or ""
    url = f"{(settings.api_url or '').rstrip('/')}/api/artifacts/jobs/{job_id}/files/{quote(relative)}"
    try:
        parent = run_files.open_dir(target.parent, runs)
    except OSError as exc:
        return "unreachable", f"cannot write {target.parent.name}/ on this host: {exc}"
    tmp = f".{target.name}.{secrets.token_hex(4)}.fetch"
    try:
        client = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT_S)
        with client, client.stream("GET", url) as r:
            if r.status_code == 404:
                return "missing", ""
            r.raise_for_status()
            expected = recorded or r.headers.get(SHA_HEADER)
            digest = hashlib.sha256()
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(tmp, flags, 0o644, dir_fd=parent), "wb") as out:
                for chunk in r.iter_bytes(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        if expected is not None and digest.hexdigest() != expected:
            return "differs", ""
        os.replace(tmp, target.name, src_dir_fd=parent, dst_dir_fd=parent)
        return "ok", ""
    except (httpx.HTTPError, OSError) as exc:
        return "unreachable", f"{type(exc).__name__}: {exc}"[:300]
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parent)
        os.close(parent)
