"""A host without the API's runs dir ships what its jobs write to the API's artifact store, and fetches
back what a job resumed here needs (docs/storage.md; the API side is api/routes/artifacts.py).

- Growing files (rank logs, events.jsonl) are appended by offset as they grow, each chunk with its
  sha256; the API skips bytes it holds, so a restarted shipper or a repeated chunk writes nothing twice.
- Whole files (checkpoints, outputs under work/, torchrun's error files, console_series.json) are
  uploaded once they are complete: a checkpoint once its `checkpoint` event recorded its sha256 (the
  trainer's atomic write is done), any other file once it kept its size and mtime for one round.
  The API keeps a file only when its bytes match the sha256 sent with it.
- It runs in threads of the worker (never in a rank): training never waits for an upload. Checkpoints
  and outputs have their own thread, so a large upload never holds back the console.
- `fetch_for_resume`: before an attempt here resumes a job that ran elsewhere, its events.jsonl and
  newest checkpoint the store has are fetched into the local run dir (checked against the sha256 the
  database recorded), so the supervisor, the trainer and `rankzero.load_checkpoint()` find them.

Node 0 starts one with `start_for_attempt` (and `finish` at the attempt's end); a follower ships its
node's logs only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import quote

import httpx
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from core import artifacts, hosts, run_files
from core.artifacts import keys
from core.settings import Settings
from core.tables import Checkpoint, Job
from trainer import checkpoint_files
from trainer.run_dir import RunDir
from worker import resume_fetch

log = logging.getLogger("rankzero.worker")
CHUNK = 4 << 20
TIMEOUT_S = 60.0
FINAL_FLUSH_S = 900.0
GROWING = ("logs/", "events.jsonl")  # appended as they grow; every other file is uploaded whole


def growing(relative: str) -> bool:
    """Rank logs (and their companions) and events.jsonl only ever grow: they are shipped by offset."""
    return relative.startswith(GROWING)


GAP_EVENT = "lost_with_host"  # fills seqs the database ingested but the store's events.jsonl never got


class ShippingFailed(RuntimeError):
    pass


@dataclass
class _State:
    offsets: dict[str, int] = field(default_factory=dict)  # growing file → bytes the API holds
    shipped: dict[str, tuple[int, int]] = field(default_factory=dict)  # whole file → (size, mtime_ns) shipped
    seen: dict[str, tuple[int, int]] = field(default_factory=dict)  # whole file → (size, mtime_ns) last round


def _client(settings: Settings) -> httpx.Client:
    token = artifacts.worker_token(settings)
    if not settings.api_url or not token:
        raise ShippingFailed("this worker cannot reach the API's artifact store: set RANKZERO_API_URL and a token")
    return httpx.Client(base_url=settings.api_url.rstrip("/") + "/api/artifacts",
                        headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT_S)  # fmt: skip


def _url(job_id: int, kind: str, relative: str) -> str:
    return f"/jobs/{int(job_id)}/{kind}/{quote(relative)}"


class Shipper:
    """Ships one job's run dir (or only its `areas`) to the API until stopped, then flushes once more."""

    def __init__(self, settings: Settings, job_id: int, run: RunDir, areas: tuple[str, ...] | None = None) -> None:
        self.settings, self.job_id, self.run, self.areas = settings, job_id, run, areas
        self.state = _State()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.client = _client(settings)

    # --- what to ship ---

    def _files(self) -> Iterator[tuple[str, Path]]:
        root = self.run.root
        if not root.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in filenames:
                path = Path(dirpath) / name
                relative = path.relative_to(root).as_posix()
                if path.is_symlink() or name.startswith("."):  # links to the bundle; temp files of atomic writes
                    continue
                try:
                    keys.shipped_path(relative)
                except keys.BadKey:
                    continue
                if self.areas is None or relative.split("/", 1)[0] in self.areas:
                    yield relative, path

    def ship_growing(self) -> None:
        for relative, path in self._files():
            if growing(relative):
                self._append(relative, path)

    def _append(self, relative: str, path: Path) -> None:
        offset = self.state.offsets.get(relative, 0)
        try:  # the link check in _files is not enough: the job may swap the file for a link since
            fh = run_files.open_file(path, "rb", self.run.root)
        except (FileNotFoundError, run_files.LinkRefused):
            return
        with fh:
            fh.seek(offset)
            data = fh.read(CHUNK)
            if not data and relative not in self.state.offsets:
                data = b""  # an empty log is sent too: the API then knows the rank exists and wrote nothing
            elif not data:
                return
            while True:
                r = self.client.post(_url(self.job_id, "append", relative), params={"offset": offset}, content=data,
                                     headers={"X-Content-SHA256": hashlib.sha256(data).hexdigest()})  # fmt: skip
                if r.status_code == 409:  # the API holds less (its copy was rebuilt): start where it ends
                    offset = int(r.headers.get("X-Stored-Size", "0"))
                    fh.seek(offset)
                    if not (data := fh.read(CHUNK)):
                        break
                    continue
                r.raise_for_status()
                offset = max(offset + len(data), int(r.json()["size"]))
                self.state.offsets[relative] = offset
                fh.seek(offset)
                if not (data := fh.read(CHUNK)):
                    break

    def ship_whole(self, final: bool = False) -> None:
        recorded = checkpoint_files.recorded_shas(self.run) if self.areas is None else {}
        for relative, path in self._files():
            if growing(relative):
                continue
            try:
                st = path.stat()
            except FileNotFoundError:  # pruned by keep_last meanwhile
                continue
            ident = (st.st_size, st.st_mtime_ns)
            if self.state.shipped.get(relative) == ident:
                continue
            if relative.startswith("checkpoints/"):
                sha = recorded.get(relative)
                if sha is None:  # not vouched for yet (being written, or its event not yet out)
                    continue
            else:
                stable = self.state.seen.get(relative) == ident
                self.state.seen[relative] = ident
                if not (stable or final):
                    continue
                try:
                    sha = run_files.sha256(path, self.run.root)
                except (FileNotFoundError, run_files.LinkRefused):
                    continue
            self._upload(relative, path, sha)
            self.state.shipped[relative] = ident

    def _upload(self, relative: str, path: Path, sha: str) -> None:
        try:
            with run_files.open_file(path, "rb", self.run.root) as fh:  # never a link the job made meanwhile
                r = self.client.post(_url(self.job_id, "files", relative), content=_chunks(fh),
                                     headers={"X-Content-SHA256": sha}, timeout=None)  # fmt: skip
        except (FileNotFoundError, run_files.LinkRefused):
            return
        if r.status_code == 400:
            log.warning("job %s: %s not kept by the store: %s", self.job_id, relative, r.text[:300])
            return
        r.raise_for_status()

    # --- running ---

    def _loop(self, step: Callable[[], None]) -> None:
        while not self.stop_event.wait(self.settings.ship_every_s):
            try:
                step()
            except Exception as exc:  # the API may be restarting: the next round tries again
                log.warning("job %s: shipping to the artifact store failed (%s); retrying", self.job_id, exc)

    def start(self) -> Shipper:
        for name, step in (("logs", self.ship_growing), ("files", self.ship_whole)):
            t = threading.Thread(target=self._loop, args=(step,), name=f"ship-{self.job_id}-{name}", daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self, keep_alive: Callable[[], object] | None = None) -> None:
        """Stop the rounds and ship what is left, within FINAL_FLUSH_S; `keep_alive` (the job's heartbeat) is
        called every few seconds meanwhile, so a large last checkpoint never makes the job look lost."""
        self.stop_event.set()
        last = threading.Thread(target=self._last_round, name=f"ship-{self.job_id}-last", daemon=True)
        last.start()
        deadline = time.monotonic() + FINAL_FLUSH_S
        while last.is_alive() and time.monotonic() < deadline:
            last.join(2.0)
            if keep_alive is not None:
                keep_alive()
        if last.is_alive():
            log.warning("job %s: the last shipment outlasted %.0f s; it goes on in the background", self.job_id,
                        FINAL_FLUSH_S)  # fmt: skip

    def _last_round(self) -> None:
        try:
            for t in self.threads:
                t.join()
            self.ship_growing()
            self.ship_whole(final=True)
        except Exception as exc:
            log.warning("job %s: the last shipment to the artifact store failed: %s", self.job_id, exc)
        finally:
            self.client.close()


def _chunks(fh: IO[bytes]) -> Iterator[bytes]:
    while data := fh.read(1 << 20):
        yield data


# --- node 0 and followers ---------------------------------------------------------------------------

_running: dict[tuple[int, int, int], Shipper] = {}
_lock = threading.Lock()


def uploads(settings: Settings) -> bool:
    """Whether this host ships to the store (it does not share the API's runs dir); recorded on its row."""
    try:
        return hosts.refresh_storage(settings) == "store"
    except Exception:  # the database hiccups: judge without recording
        return hosts.storage_of(settings) == "store"


def start_for_attempt(settings: Settings, job_id: int, attempt: int, run: RunDir, node_rank: int = 0) -> None:
    """Start shipping this node's part of an attempt, when this host uploads (a follower: its logs only)."""
    if not uploads(settings):
        return
    shipper = Shipper(settings, job_id, run, areas=None if node_rank == 0 else ("logs", "failures")).start()
    with _lock:
        _running[(job_id, attempt, node_rank)] = shipper
    log.info("job %s attempt %s: node %s ships to the API's artifact store", job_id, attempt, node_rank)


def finish(job_id: int, attempt: int, node_rank: int = 0, keep_alive: Callable[[], object] | None = None) -> None:
    """Ship the last of this node's files (idempotent: a second call finds nothing to do)."""
    with _lock:
        shipper = _running.pop((job_id, attempt, node_rank), None)
    if shipper is not None:
        shipper.stop(keep_alive)


# --- fetching for a resume ----------------------------------------------------------------------


def fetch_for_resume(engine: Engine, settings: Settings, job_id: int, run: RunDir) -> None:
    """Bring the store's events.jsonl and newest checkpoint of job `job_id` into the local run dir, when
    this host uploads and the store holds more than the local copy (a job that ran on another host)."""
    if uploads(settings):
        run.root.mkdir(parents=True, exist_ok=True)
        with _client(settings) as client:
            _fetch_events(client, job_id, run)
            _fetch_checkpoint(engine, client, job_id, run)
    if run.events.is_file():  # shared or fetched: the record an uploading host shipped may end early
        fill_gap(run.events, _ingested_seq(engine, job_id))


def _ingested_seq(engine: Engine, job_id: int) -> int:
    with Session(engine) as s:
        job = s.get(Job, job_id)
        return int(job.ingested_seq) if job is not None else -1


def _download(client: httpx.Client, job_id: int, relative: str, target: Path, sha: str | None) -> bool:
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.fetch")
    digest = hashlib.sha256()
    try:
        with client.stream("GET", _url(job_id, "files", relative)) as r:
            if r.status_code == 404:
                return False
            r.raise_for_status()
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as out:
                for chunk in r.iter_bytes(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        if sha is not None and digest.hexdigest() != sha:
            log.warning("job %s: the store's %s does not match its recorded sha256; not used", job_id, relative)
            return False
        os.replace(tmp, target)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _fetch_events(client: httpx.Client, job_id: int, run: RunDir) -> None:
    remote = run.root / f".events.{secrets.token_hex(4)}.remote"
    try:
        if not _download(client, job_id, "events.jsonl", remote, None):
            return
        local = run.events.stat().st_size if run.events.is_file() else 0
        if remote.stat().st_size <= local:  # this host wrote the newest record itself
            return
        os.replace(remote, run.events)
    finally:
        with contextlib.suppress(FileNotFoundError):
            remote.unlink()


def _sha_or_none(path: Path, root: Path) -> str | None:
    try:
        return run_files.sha256(path, root)
    except OSError:
        return None


def fill_gap(events: Path, ingested_seq: int) -> int:
    """Seqs the database ingested past the end of `events` (lost with the host that wrote them) get a
    placeholder line each, so the record stays gapless and new events continue after them; how many."""
    last = 0
    with run_files.open_file(events, "rb", events.parent) as fh:  # the job's run dir: no link followed
        for line in fh:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                last = max(last, int(json.loads(line)["seq"]))
    missing = range(last + 1, ingested_seq + 1)
    if missing:
        with run_files.open_file(events, "a", events.parent) as fh:
            for seq in missing:
                fh.write(json.dumps({"seq": seq, "time": time.time(), "type": GAP_EVENT}) + "\n")
    return len(missing)


def prepare_follower(engine: Engine, settings: Settings, job_id: int, attempt: int, run: RunDir,
                     spec: dict[str, object]) -> None:  # fmt: skip
    """A follower on a host that uploads has no node 0's run dir: it writes the ranks' spec.json itself and,
    resuming, fetches the newest checkpoint the store holds and points the built-in trainer at it, else the
    checkpoint the spec resumes from (resume_fetch.ResumeUnavailable when it cannot be provided here)."""
    if not uploads(settings):
        if attempt == 1 and spec.get("resume_from"):  # node 0 may have a runs dir of its own: its path is not ours
            spec = dict(spec)
            resume_fetch.provide_in_spec(engine, settings, spec)
            run_files.write_atomic(run.spec, json.dumps(spec, indent=2), run.root)
        return
    run.root.mkdir(parents=True, exist_ok=True)
    latest = None
    if attempt > 1:
        with _client(settings) as client:
            latest = _fetch_checkpoint(engine, client, job_id, run)
    spec = dict(spec)
    if latest is not None and not spec.get("entrypoint"):
        spec["resume_from"] = str(latest)
    else:
        resume_fetch.provide_in_spec(engine, settings, spec, optional=latest is not None)
    run_files.write_atomic(run.spec, json.dumps(spec, indent=2), run.root)


def _fetch_checkpoint(engine: Engine, client: httpx.Client, job_id: int, run: RunDir) -> Path | None:
    with Session(engine) as s:
        newest_first = select(Checkpoint).where(col(Checkpoint.job_id) == job_id).order_by(col(Checkpoint.step).desc())
        rows = s.exec(newest_first).all()
    for row in rows:  # the newest the store still has (keep_last pruned the oldest)
        target = run.root / row.path
        if target.is_file() and _sha_or_none(target, run.root) == row.sha256:
            return target
        if _download(client, job_id, row.path, target, row.sha256):
            log.info("job %s: fetched %s from the artifact store to resume from", job_id, row.path)
            return target
    return None
