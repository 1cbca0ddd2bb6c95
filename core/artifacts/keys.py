"""Names of things in the artifact store: `job_<id>/<path inside the run dir>` (pure, no I/O).

A key is the file's path relative to the API's runs dir, so the disk back-end's layout *is* the runs dir
and every existing read path (logs, checkpoints, the console) finds shipped files where a shared runs dir
would have put them. Every key that comes from a request or a worker passes `job_key`: relative, no `..`,
no control characters or backslashes, bounded length and depth, and inside one of the run dir's areas a
job may write (`SHIPPED_AREAS`).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

MAX_KEY_CHARS = 1024
MAX_DEPTH = 32
_PART = re.compile(r"^[^\x00-\x1f\x7f/\\]{1,255}$")
# The run dir's parts a worker ships (trainer/run_dir.py names them); anything else is refused.
SHIPPED_AREAS = frozenset({"checkpoints", "logs", "work", "tensorboard", "failures"})
SHIPPED_FILES = frozenset({"events.jsonl", "console_series.json", "spec.json"})


class BadKey(ValueError):
    """The path cannot name an artifact; the message says why."""


def relative_path(raw: str) -> str:
    """`raw` as a clean relative POSIX path inside a run dir, or BadKey saying what is wrong with it."""
    if not raw or len(raw) > MAX_KEY_CHARS:
        raise BadKey(f"a path must have 1 to {MAX_KEY_CHARS} characters")
    if raw.startswith("/"):
        raise BadKey("give the path relative to the job's run dir (it starts with '/')")
    parts = raw.split("/")
    if len(parts) > MAX_DEPTH:
        raise BadKey(f"a path may have at most {MAX_DEPTH} parts")
    for part in parts:
        if part in ("", ".", ".."):
            raise BadKey(f"the path {raw!r} has an empty, '.' or '..' part")
        if not _PART.match(part):
            raise BadKey(f"the path part {part[:60]!r} has a control character or a backslash")
    return "/".join(parts)


def shipped_path(raw: str) -> str:
    """A relative path a worker may ship (inside SHIPPED_AREAS or one of SHIPPED_FILES)."""
    path = relative_path(raw)
    head = path.split("/", 1)[0]
    if path in SHIPPED_FILES or (head in SHIPPED_AREAS and "/" in path):
        return path
    raise BadKey(
        f"{path!r} is not a file a job ships (areas: {', '.join(sorted(SHIPPED_AREAS))}; "
        f"files: {', '.join(sorted(SHIPPED_FILES))})"
    )


def job_prefix(job_id: int) -> str:
    if job_id < 1:
        raise BadKey("job ids start at 1")
    return f"job_{int(job_id)}/"


def job_key(job_id: int, relative: str) -> str:
    """The key of `relative` (already checked) in job `job_id`'s run dir."""
    return job_prefix(job_id) + relative_path(relative)


def relative_of(job_id: int, key: str) -> str:
    """`job_<id>/a/b` → `a/b`."""
    prefix = job_prefix(job_id)
    if not key.startswith(prefix):
        raise BadKey(f"{key!r} is not job {job_id}'s")
    return key[len(prefix) :]


def under(relative: str, folder: str) -> bool:
    """Whether `relative` lies inside `folder` ('' : everything)."""
    return not folder or PurePosixPath(relative).is_relative_to(PurePosixPath(folder))
