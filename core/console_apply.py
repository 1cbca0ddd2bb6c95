"""A console pattern added to a job after its lines were printed: replayed over rank 0's stored console
(every attempt, at most MAX_BYTES a stream) and its points written beside the job's others, so the curve
appears without rerunning it (POST /api/jobs/{id}/console-patterns; a running job's worker replays it itself,
worker/console_feed.py). Points take seqs of the external space (metric_rollup.EXTERNAL_SEQ_BASE up) and
only steps past the highest a name already holds, as the worker's Ingestor writes them.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import text

from core import metric_rollup, run_files
from core.console_reader.job import Point, UserPattern, replay
from trainer.run_dir import RunDir

MAX_BYTES = 1 << 30  # per stream per attempt, as the worker reads
CHUNK = 1 << 20


def _pieces(run: RunDir, attempts: int) -> Iterator[tuple[str, str]]:
    for attempt in range(1, attempts + 1):
        for stream in ("stdout", "stderr"):
            path = run.rank_logs(stream, attempt).get(0)
            if path is None:
                continue
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            try:
                with run_files.open_file(path, "rb", run.root) as fh:  # no link the job made is followed
                    read = 0
                    while read < MAX_BYTES and (chunk := fh.read(min(CHUNK, MAX_BYTES - read))):
                        read += len(chunk)
                        yield f"{attempt}{stream}", decoder.decode(chunk)
            except OSError:
                continue


def points_of(run: RunDir, attempts: int, patterns: list[UserPattern]) -> list[Point]:
    return replay(_pieces(run, attempts), patterns)


def write_points(conn: Any, job_id: int, points: list[Point]) -> int:
    """Insert `points` (past each name's highest step) and fold them into the rollups; returns how many."""
    held = dict(conn.execute(text("SELECT name, max(step) FROM metric_points WHERE job_id = :j GROUP BY name"),
                             {"j": job_id}).all())  # fmt: skip
    top = conn.execute(
        text("SELECT max(seq) FROM metric_points WHERE job_id = :j AND seq >= :base"),
        {"j": job_id, "base": metric_rollup.EXTERNAL_SEQ_BASE},
    ).scalar()
    seq = metric_rollup.EXTERNAL_SEQ_BASE if top is None else int(top) + 1
    first, now, rows = seq, time.time(), []
    for p in points:
        if p.step <= held.get(p.name, -1):
            continue
        held[p.name] = p.step
        rows.append({"j": job_id, "seq": seq, "step": p.step, "name": p.name, "value": p.value, "t": now})
        seq += 1
    if rows:
        conn.execute(
            text("INSERT INTO metric_points (job_id, seq, step, name, value, time) "
                 "VALUES (:j, :seq, :step, :name, :value, :t) ON CONFLICT (job_id, seq) DO NOTHING"),
            rows,
        )  # fmt: skip
        metric_rollup.fold(conn, job_id, first - 1, seq - 1)
    return len(rows)
