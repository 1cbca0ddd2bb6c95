"""Checkpoint download (sha256 matches), per-rank logs with offset/tail, and the SSE stream
emitting status, progress, metrics, checkpoint and end for rows written while it is open."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import insert
from sqlmodel import Session

from core.db import get_engine
from core.jobs import transition
from core.settings import Settings
from core.tables import Checkpoint, Job, JobStatus, MetricPoint
from tests.support.jobs import wait
from trainer.run_dir import job_run_dir


def test_checkpoint_list_and_download_sha256(client: TestClient, make_job, db: Session, settings: Settings) -> None:
    job = make_job(status=JobStatus.running)
    run = job_run_dir(settings.resolved_runs_dir, job.id)
    payload = os.urandom(300_000)
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_00000010.pt").write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    db.add(
        Checkpoint(
            job_id=job.id, step=10, epoch=0, path="checkpoints/step_00000010.pt", bytes=len(payload), sha256=digest
        )
    )
    db.add(Checkpoint(job_id=job.id, step=20, epoch=1, path="checkpoints/step_00000020.pt", bytes=1, sha256="0" * 64))
    db.commit()
    rows = client.get(f"/api/jobs/{job.id}/checkpoints").json()
    assert [r["step"] for r in rows] == [10, 20]
    assert set(rows[0]) == {"id", "job_id", "step", "epoch", "path", "bytes", "sha256", "created_at"}
    r = client.get(f"/api/checkpoints/{rows[0]['id']}/download")
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == digest
    assert "step_00000010.pt" in r.headers["content-disposition"]
    gone = client.get(f"/api/checkpoints/{rows[1]['id']}/download")
    assert gone.status_code == 404 and "gone" in gone.json()["detail"]
    assert client.get("/api/checkpoints/987654/download").status_code == 404


def test_logs_per_rank_with_offset_and_tail(client: TestClient, make_job, settings: Settings) -> None:
    job = make_job(status=JobStatus.running)
    base = job_run_dir(settings.resolved_runs_dir, job.id) / "logs" / "attempt_1" / "abc" / "attempt_0"
    for rank in (0, 1):
        (base / str(rank)).mkdir(parents=True)
        (base / str(rank) / "stderr.log").write_text("".join(f"rank{rank} line {i}\n" for i in range(100)))
        (base / str(rank) / "stdout.log").write_text(f"out{rank}\n")
    r = client.get(f"/api/jobs/{job.id}/logs", params={"rank": 1, "limit": 30}).json()
    assert r["ranks"] == [0, 1] and r["rank"] == 1 and r["stream"] == "stderr"
    assert r["text"] == "rank1 line 0\nrank1 line 1\nrank" and r["offset"] == 0 and r["next_offset"] == 30
    more = client.get(f"/api/jobs/{job.id}/logs", params={"rank": 1, "offset": r["next_offset"], "limit": 10}).json()
    assert more["text"] == "1 line 2\nr" and more["next_offset"] == 40
    tail = client.get(f"/api/jobs/{job.id}/logs", params={"rank": 0, "tail": 13}).json()
    assert tail["text"] == "rank0 line 99\n"[-13:] and tail["next_offset"] == (base / "0" / "stderr.log").stat().st_size
    end = client.get(f"/api/jobs/{job.id}/logs", params={"rank": 0, "offset": 10**9}).json()
    assert end["text"] == "" and end["next_offset"] == tail["next_offset"]
    assert client.get(f"/api/jobs/{job.id}/logs", params={"stream": "stdout"}).json()["text"] == "out0\n"
    assert client.get(f"/api/jobs/{job.id}/logs", params={"attempt": 1}).json()["text"].startswith("rank0 line 0")
    assert client.get(f"/api/jobs/{job.id}/logs", params={"attempt": 2}).json() | {"ranks": None} == {
        "rank": 0,
        "stream": "stderr",
        "ranks": None,
        "offset": 0,
        "next_offset": 0,
        "text": "",
    }
    none = client.get(f"/api/jobs/{job.id}/logs", params={"rank": 7}).json()
    assert none["text"] == "" and none["ranks"] == [0, 1]


def _parse_sse(lines: list[str]) -> list[tuple[str, object]]:
    events, event, data = [], None, []
    for line in lines:
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            data.append(line.split(":", 1)[1].strip())
        elif line == "" and event:
            events.append((event, json.loads("\n".join(data))))
            event, data = None, []
    return events


def test_stream_emits_status_progress_metrics_checkpoint_end(
    live_api, settings: Settings, make_job, auth_headers: dict
) -> None:
    base = live_api(settings)
    job = make_job(status=JobStatus.queued)
    url = settings.resolved_database_url

    seen: list[tuple[str, dict]] = []  # the stream's events so far, as the reader gets them

    def saw(kind: str, status: str | None = None) -> Callable[[], bool]:
        return lambda: any(k == kind and (status is None or d["status"] == status) for k, d in list(seen))

    def worker_writes() -> None:  # what the worker does, straight into the database
        # Each write waits until the stream has shown the one before it: on a loaded machine the stream may
        # open or poll late, and a change made before it looked is not what this test is about.
        wait(saw("status", "queued"), 60, "the stream's first status")
        with Session(get_engine(url)) as s:
            transition(s, job.id, JobStatus.starting)
            transition(s, job.id, JobStatus.running)
            s.commit()
            wait(saw("status", "running"), 60, "running on the stream")
            s.execute(
                insert(MetricPoint),
                [
                    {"job_id": job.id, "seq": i, "name": "train/loss", "step": i, "value": 2.0 - i / 10, "time": 0.0}
                    for i in range(5)
                ],
            )
            row = s.get(Job, job.id)
            row.step, row.total_steps, row.samples = 5, 20, 640
            s.add(Checkpoint(job_id=job.id, step=5, path="checkpoints/step_00000005.pt", bytes=3, sha256="a" * 64))
            s.commit()
            wait(saw("checkpoint"), 60, "the checkpoint on the stream")
            transition(s, job.id, JobStatus.succeeded)
            s.commit()

    writer = threading.Thread(target=worker_writes, daemon=True)
    writer.start()
    lines: list[str] = []
    with httpx.stream("GET", f"{base}/api/jobs/{job.id}/stream", headers=auth_headers, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            lines.append(line)
            if line == "":
                seen[:] = _parse_sse(lines)
                if seen and seen[-1][0] == "end":
                    break
    writer.join(timeout=10)
    events = _parse_sse(lines + [""])
    kinds = [k for k, _ in events]
    statuses = [d["status"] for k, d in events if k == "status"]
    assert statuses[0] == "queued" and statuses[-1] == "succeeded" and "running" in statuses
    assert any(k == "progress" and d["step"] == 5 and d["total_steps"] == 20 for k, d in events)
    metrics = [p for k, d in events if k == "metrics" for p in d]
    assert [p["step"] for p in metrics] == [0, 1, 2, 3, 4] and metrics[0] == {
        "name": "train/loss",
        "step": 0,
        "value": 2.0,
    }
    assert "checkpoint" in kinds and kinds[-1] == "end"


def test_stream_sends_both_seq_spaces_and_resumes_each(live_api, settings: Settings, make_job, auth_headers) -> None:
    """System samples and TensorBoard scalars (seqs from EXTERNAL_SEQ_BASE) must not hide the trainer's
    points written after them (their seqs are far lower)."""
    from core.metric_rollup import EXTERNAL_SEQ_BASE as BASE

    base = live_api(settings)
    job = make_job(status=JobStatus.running)

    def write(rows: list[tuple[int, str, int]]) -> None:
        with Session(get_engine(settings.resolved_database_url)) as s:
            s.execute(insert(MetricPoint), [{"job_id": job.id, "seq": q, "name": n, "step": st, "value": 1.0,
                                             "time": 0.0} for q, n, st in rows])  # fmt: skip
            s.commit()

    def read(headers: dict, then_write: list[tuple[int, str, int]]) -> tuple[list[tuple[str, int]], str]:
        """Open the stream, write `then_write` once it has sent its first event (a fresh stream starts at what
        exists when it opens), and read until three points came."""
        got: list[tuple[str, int]] = []
        written = False
        with httpx.stream("GET", f"{base}/api/jobs/{job.id}/stream", headers=headers, timeout=60) as r:
            lines: list[str] = []
            for line in r.iter_lines():
                lines.append(line)
                if line == "" and not written:
                    write(then_write)
                    written = True
                if line == "" and any(x.startswith("event: metrics") for x in lines[-4:]):
                    events = _parse_sse(lines)
                    got += [(p["name"], p["step"]) for k, d in events if k == "metrics" for p in d]
                    last_id = [x for x in lines if x.startswith("id: ")][-1].removeprefix("id: ")
                    if len(got) >= 3:
                        return got, last_id
        raise AssertionError(got)

    write([(BASE, "sys/rss_mb_total", 0)])
    later = [(0, "train/loss", 1), (1, "train/loss", 2), (BASE + 1, "sys/rss_mb_total", 2)]
    got, last_id = read(auth_headers, later)
    assert sorted(got) == [("sys/rss_mb_total", 2), ("train/loss", 1), ("train/loss", 2)], got
    assert last_id == f"1:{BASE + 1}"
    later = [(2, "train/loss", 3), (3, "train/loss", 4), (BASE + 2, "sys/rss_mb_total", 4)]
    again, _ = read({**auth_headers, "Last-Event-ID": last_id}, later)  # a reconnect resumes both cursors
    assert sorted(again) == [("sys/rss_mb_total", 4), ("train/loss", 3), ("train/loss", 4)], again


def test_stream_of_unknown_job_is_404(client: TestClient) -> None:
    assert client.get("/api/jobs/31337/stream").status_code == 404
