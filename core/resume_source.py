"""Where a resumed job's checkpoint is: its address, and what a worker does to provide it (pure, no I/O).

A checkpoint is addressed by its **key**: its path relative to the runs dir, `job_<id>/checkpoints/step_<N>.pt`
(core/artifacts/keys.py), never by a host's absolute path. The API's runs dir, a worker's own runs dir and
the artifact store all hold a job's files at that key, so the key means the same file on every host. The API
stores this form in the spec's `resume_from` (an absolute path inside its runs dir, as older specs and users
give it, is turned into it); each worker resolves it in its own runs dir and, when the file is not there,
fetches it from the store, checked against the sha256 the database recorded (worker/artifact_shipping.py
`provide_resume`). A resume that cannot provide its checkpoint fails before any rank starts, with a sentence
saying why (`decide`): never a silent start from scratch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath
from typing import Literal

from core.artifacts import keys

_JOB_DIR = re.compile(r"^job_([1-9]\d{0,9})$")

Local = Literal["absent", "intact", "unverified", "differs"]
Fetched = Literal["not tried", "ok", "missing", "differs", "unreachable"]


def resume_key(given: str, *runs_dirs: PurePath) -> str:
    """`given` as a key: a relative path stays itself (checked), an absolute one must lie inside one of
    `runs_dirs` (the API's, as configured and resolved). Raises keys.BadKey saying what is wrong."""
    if given.startswith("/"):
        path = PurePosixPath(given)
        roots = [PurePosixPath(str(r)) for r in runs_dirs]
        inside = [r for r in roots if path != r and path.is_relative_to(r)]
        if not inside:
            where = f" ({roots[-1]})" if roots else ""
            raise keys.BadKey(
                f"path leaves the runs dir{where}; give the checkpoint as job_<id>/checkpoints/step_<N>.pt "
                "(the path `rankzero checkpoints JOB` prints)"
            )
        given = path.relative_to(inside[0]).as_posix()
    return keys.relative_path(given)


def key_job(key: str) -> tuple[int, str] | None:
    """(job id, path inside its run dir) of a key in a job's run dir (`job_7/checkpoints/x.pt`); None for a
    file elsewhere in the runs dir (which only a host sharing the API's runs dir can read)."""
    head, _, rest = key.partition("/")
    found = _JOB_DIR.match(head)
    return (int(found[1]), rest) if found and rest else None


@dataclass(frozen=True)
class Decision:
    action: Literal["use", "fetch", "fail"]
    reason: str = ""  # for "fail": the sentence the job's error shows


def decide(key: str, local: Local, *, in_store: bool, can_fetch: bool, fetched: Fetched, detail: str = "") -> Decision:
    """What a worker does to provide checkpoint `key` before any rank starts.

    `local`: this host's copy (absent; intact: matches the recorded sha256; unverified: present, nothing
    recorded to check it against; differs: present, not the recorded bytes). `in_store`: the key names a job's
    file, which the store may hold. `can_fetch`: this worker has RANKZERO_API_URL and a token. `fetched`: how a
    fetch went (`detail`: the error of an unreachable store)."""
    if local in ("intact", "unverified") or fetched == "ok":
        return Decision("use")
    where = f"the checkpoint {key}"
    after_fetch = {
        "missing": f"{where} is in neither this host's runs dir nor the API's artifact store (pruned by keep_last, "
        "or deleted): resume from a checkpoint `rankzero checkpoints JOB` lists",
        "differs": f"the artifact store's copy of {where} does not match the sha256 recorded when it was written: "
        "it is not used; resume from another checkpoint",
        "unreachable": f"{where} is not on this host and the API's artifact store could not be reached "
        f"({detail or 'no answer'}); resubmit the job once the API answers",
    }
    if fetched in after_fetch:
        return Decision("fail", after_fetch[fetched])
    if not in_store:
        return Decision(
            "fail",
            f"{where} is not in this host's runs dir, and only a job's own files (job_<id>/…) can be fetched "
            "from the artifact store",
        )
    if can_fetch:
        return Decision("fetch")
    state = "does not match its recorded sha256" if local == "differs" else "is not in this host's runs dir"
    return Decision(
        "fail",
        f"{where} {state}, and this worker cannot fetch it from the API's artifact store: set RANKZERO_API_URL "
        "(and its token) on this worker",
    )
