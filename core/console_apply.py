"""A console pattern added to a job after its lines were printed: replayed over rank 0's stored console
(every attempt, at most MAX_BYTES a stream) and its points written beside the job's others, so the curve
appears without rerunning it (POST /api/jobs/{id}/console-patterns; a running job's worker replays it itself,
worker/console_feed.py). Points take seqs of the external space (metric_rollup.EXTERNAL_SEQ_BASE up) and
only steps past the highest a name already holds, as the worker's Ingestor writes them.
"""

from __future__ import annotations

import codecs
import json
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


def note_series(run: RunDir, names: set[str]) -> None:
    """Add `names` to what console_series.json says the console gave (the chart's "from the console", the
    summary's series), as the worker would have had the pattern been there from the start."""
    if not names:
        return
    try:
        found = json.loads(run_files.read_text(run.console_series, run.root, max_bytes=4 << 20))
    except (OSError, ValueError):
        found = {}
    body = found if isinstance(found, dict) else {}
    body["names"] = sorted({*(n for n in body.get("names") or [] if isinstance(n, str)), *names})
    kept = body.get("summary")
    summary: dict[str, Any] = kept if isinstance(kept, dict) else {}
    series = [n for n in summary.get("series") or [] if isinstance(n, str)]
    summary["series"] = series + sorted(names - set(series))
    suggestion = summary.get("suggestion")
    if summary.get("example") is None and isinstance(suggestion, dict):
        summary["example"] = suggestion.get("line")
    summary["suggestion"] = None
    body["summary"] = summary
    try:  # never through a link the job made (the file is in its run dir)
        run_files.write_atomic(run.console_series, json.dumps(body), run.root)
    except OSError:
        return
