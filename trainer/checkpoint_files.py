"""A run's checkpoint files and the one rule for "the newest intact checkpoint" (torch-free).

Everyone who picks a checkpoint to continue from uses `newest_intact` / `intact_newest_first`: the
worker (a restart or a host loss resumes from it; a failed job's error names it), the SDK's
`rankzero.load_checkpoint`, the trainer (its save-failure message names the one still intact).

The rule: the newest `checkpoints/step_*.pt` whose bytes match the sha256 recorded for it when it
was written (its `checkpoint` event in events.jsonl, or its database row, which the worker ingests
from that event). A file no record vouches for (written, then the rank died before the event
reached the file) or a torn / byte-flipped one is passed over for the one before it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePath

from trainer.event_types import EventType
from trainer.run_dir import CHECKPOINT_NAME, RunDir

# A `checkpoint` line holds this text; other lines (most of a long run's: metrics) are not parsed.
_CHECKPOINT_MARK = f'"{EventType.checkpoint.value}"'.encode()


def checkpoint_step(path: str | PurePath) -> int | None:
    """The step in a checkpoint's file name (`.../step_00000120.pt` → 120); None for another name."""
    found = CHECKPOINT_NAME.match(PurePath(str(path)).name)
    return int(found.group(1)) if found else None


def list_checkpoints(run: RunDir) -> list[tuple[int, Path]]:
    """(step, path) of every finished checkpoint file in the run, oldest first (temp files excluded)."""
    if not run.checkpoints.is_dir():
        return []
    found = []
    for p in run.checkpoints.iterdir():
        step = checkpoint_step(p.name)
        if step is not None:
            found.append((step, p))
    return sorted(found)


def file_sha256(path: Path) -> str:
    """sha256 of the file's bytes, read in 1 MiB chunks (checkpoints can be gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def recorded_shas(run: RunDir) -> dict[str, str]:
    """checkpoint path (relative to the run dir) → the sha256 its `checkpoint` event in events.jsonl
    recorded; torn or unparseable lines are skipped (a later event for the same path wins)."""
    shas: dict[str, str] = {}
    try:
        f = run.events.open("rb")
    except OSError:
        return shas
    with f:
        for line in f:
            if _CHECKPOINT_MARK not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict) or event.get("type") != EventType.checkpoint.value:
                continue
            if isinstance(event.get("path"), str) and event.get("sha256"):
                shas[event["path"]] = str(event["sha256"])
    return shas


def relative_name(run: RunDir, path: Path) -> str:
    """How records name a checkpoint: its path relative to the run dir (`checkpoints/step_….pt`)."""
    return str(path.relative_to(run.root))


def intact_newest_first(
    run: RunDir, recorded: Mapping[str, str], *, passed_over: list[tuple[Path, str]] | None = None
) -> Iterator[Path]:
    """The run's checkpoints whose bytes match `recorded` (relative path → sha256), newest first, resolved.

    `passed_over`, when given, collects (path, why) for each newer file skipped, so a caller can say so.
    """
    for _, path in reversed(list_checkpoints(run)):
        want = recorded.get(relative_name(run, path))
        if not want:
            why = "no checkpoint event records its sha256"
        else:
            try:
                if file_sha256(path) == want:
                    yield path.resolve()
                    continue
                why = "its bytes do not match the sha256 recorded for it (torn or damaged)"
            except OSError as exc:  # deleted under us (keep_last) or unreadable: the next older one
                why = f"it cannot be read ({exc.strerror or exc})"
        if passed_over is not None:
            passed_over.append((path, why))


def newest_intact(run: RunDir, recorded: Mapping[str, str]) -> Path | None:
    """The newest checkpoint whose bytes match the sha256 recorded for it (None: none does)."""
    return next(intact_newest_first(run, recorded), None)
