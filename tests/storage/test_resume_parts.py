"""A resumed job's checkpoint, by table (pure; core/resume_source.py): its key whatever form a user or an
older spec gave, the job it belongs to, and what a worker does to provide it before any rank starts."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from core.artifacts import keys
from core.resume_source import decide, key_job, resume_key

RUNS = PurePosixPath("/srv/rankzero/runs")
REAL = PurePosixPath("/mnt/nfs/runs")  # the same runs dir, resolved


@pytest.mark.parametrize(
    ("given", "key"),
    [
        ("job_7/checkpoints/step_00000080.pt", "job_7/checkpoints/step_00000080.pt"),
        ("/srv/rankzero/runs/job_7/checkpoints/step_00000080.pt", "job_7/checkpoints/step_00000080.pt"),
        ("/mnt/nfs/runs/job_7/work/sub/x.pt", "job_7/work/sub/x.pt"),  # the resolved runs dir too
        ("7/checkpoints/step_00000010.pt", "7/checkpoints/step_00000010.pt"),  # a file outside a job's run dir
        ("/home/b/.rankzero/runs/job_7/checkpoints/step_00000080.pt", None),  # another host's absolute path
        ("/srv/rankzero/runs", None),
        ("/etc/passwd", None),
        ("../outside.pt", None),
        ("job_7/../../x.pt", None),
        ("job_7//checkpoints/x.pt", None),
        ("job_7/a\\b.pt", None),
    ],
)
def test_a_checkpoint_is_named_by_its_key(given: str, key: str | None) -> None:
    if key is None:
        with pytest.raises(keys.BadKey):
            resume_key(given, RUNS, REAL)
    else:
        assert resume_key(given, RUNS, REAL) == key


@pytest.mark.parametrize(
    ("key", "owned"),
    [
        ("job_7/checkpoints/step_00000080.pt", (7, "checkpoints/step_00000080.pt")),
        ("job_12/work/sub/x.pt", (12, "work/sub/x.pt")),
        ("job_007/checkpoints/x.pt", None),  # not job 7's run dir (job_run_dir names it job_7)
        ("job_0/checkpoints/x.pt", None),
        ("job_7", None),
        ("uploads/checkpoints/step_00000010.pt", None),
    ],
)
def test_the_job_a_key_belongs_to(key: str, owned: tuple[int, str] | None) -> None:
    assert key_job(key) == owned


KEY = "job_7/checkpoints/step_00000080.pt"


@pytest.mark.parametrize(
    ("local", "in_store", "can_fetch", "fetched", "action", "words"),
    [
        # Here already: used as it is (checked against its recorded sha256 when there is one).
        ("intact", True, False, "not tried", "use", ""),
        ("unverified", False, False, "not tried", "use", ""),
        # Not here: fetched when this worker reaches the store, and used once its bytes match.
        ("absent", True, True, "not tried", "fetch", ""),
        ("differs", True, True, "not tried", "fetch", ""),
        ("absent", True, True, "ok", "use", ""),
        # Every way it cannot be provided fails before the ranks start, saying why.
        ("absent", True, True, "missing", "fail", "neither this host's runs dir nor the API's artifact store"),
        ("absent", True, True, "differs", "fail", "does not match the sha256 recorded"),
        ("absent", True, True, "unreachable", "fail", "could not be reached (ConnectError: refused)"),
        ("absent", True, False, "not tried", "fail", "set RANKZERO_API_URL"),
        ("differs", True, False, "not tried", "fail", "does not match its recorded sha256"),
        ("absent", False, True, "not tried", "fail", "only a job's own files"),
    ],
)
def test_what_a_worker_does_to_provide_a_checkpoint(
    local: str, in_store: bool, can_fetch: bool, fetched: str, action: str, words: str
) -> None:
    decision = decide(KEY, local, in_store=in_store, can_fetch=can_fetch, fetched=fetched,  # type: ignore[arg-type]
                      detail="ConnectError: refused")  # fmt: skip
    assert decision.action == action
    assert words in decision.reason
    if action == "fail":
        assert KEY in decision.reason  # it names the checkpoint
