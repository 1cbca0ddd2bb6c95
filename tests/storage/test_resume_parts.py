"""A resumed job's checkpoint, by table (pure; core/resume_source.py): its key whatever form a user or an
older spec gave, the job it belongs to, and what a worker does to provide it before any rank starts."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from core.artifacts import keys
from core.resume import extend_refusal, longer_script_spec, script_length_param
from core.resume_source import decide, key_job, resume_key
from trainer.spec import JobSpec

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


SCRIPT = {"entrypoint": "train.py --steps ${params.steps} --lr ${params.lr}", "params": {"steps": 8, "lr": 0.1}}


@pytest.mark.parametrize(
    ("template", "param"),
    [
        (SCRIPT, "steps"),
        ({"entrypoint": "train.py", "params": {"max_steps": 50}}, "max_steps"),  # read by rankzero.params()
        ({"entrypoint": "train.py --epochs 3", "params": {"lr": 0.1}}, None),
        ({"entrypoint": "train.py --steps 8"}, None),
        ({"model": {"name": "mlp"}, "max_steps": 8}, None),  # the built-in trainer: max_steps, no param needed
    ],
)
def test_a_script_sweeps_length_param(template: dict, param: str | None) -> None:
    assert script_length_param(template) == param
    refused = extend_refusal(template)
    assert (refused is None) == (param is not None or "entrypoint" not in template)
    if refused is not None:
        assert "params.steps" in refused  # it says what to do


@pytest.mark.parametrize(
    ("steps", "target"),
    [(None, 16), (20, 20), (4, None), (3, None)],  # default: twice its own length; not past the checkpoint: refused
)
def test_a_script_trial_trained_longer_raises_its_length_param(steps: int | None, target: int | None) -> None:
    trial = {"name": "t", "entrypoint": "train.py --steps 8 --lr 0.1", "params": {"steps": 8, "lr": 0.1}}
    if target is None:
        with pytest.raises(ValueError, match="0 steps"):
            longer_script_spec(SCRIPT, trial, checkpoint_step=4, resume_from="job_3/checkpoints/x.pt", steps=steps)
        return
    spec, note = longer_script_spec(SCRIPT, trial, checkpoint_step=4, resume_from="job_3/checkpoints/x.pt", steps=steps)
    assert spec["params"] == {"steps": target, "lr": 0.1} and spec["resume_from"] == "job_3/checkpoints/x.pt"
    checked = JobSpec.model_validate({**spec, "device": "cpu", "code": "sha256:" + "a" * 64})
    assert checked.entrypoint == f"train.py --steps {target} --lr 0.1"
    assert f"to {target:,}" in note
