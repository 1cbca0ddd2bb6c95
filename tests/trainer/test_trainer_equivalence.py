"""The equivalence promise with real torchrun processes (gloo, CPU): same W×A and batch size → same
samples per step, same train/loss, same validation, same final weights; also DDP skips the all-reduce
on all but the last micro-step, and a DDP(2) checkpoint resumes exactly on one process × 2 micro-steps.

One torchrun launch runs every 2-rank job (probe.py) and one plain process runs every 1-rank job.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.support.trainer_runs import (
    final_weights,
    load_checkpoint,
    make_spec,
    metric_series,
    read_events,
    relative_error,
    run_probe,
)
from trainer.data.datasets import build_datasets
from trainer.data.layout import BatchLayout
from trainer.models import build_model
from trainer.spec import JobSpec

STEPS = 15  # 160 training samples / global batch 16 = 10 steps per epoch: crosses an epoch boundary
SGD = {"name": "sgd", "lr": 0.1, "momentum": 0.9}
ADAMW = {"name": "adamw", "lr": 0.01, "weight_decay": 0.01}
NO_SHUFFLE = {"shuffle": False}
CLIP_COSINE = {"grad_clip_norm": 1.0, "scheduler": {"name": "cosine", "warmup_steps": 3}}

# name → (spec overrides); the 2-rank jobs
RANKS_2 = {
    "ddp_sgd": dict(nproc=2, optimizer=SGD),
    "manual_sgd": dict(nproc=2, sync="manual", optimizer=SGD),
    "ddp_adamw": dict(nproc=2, optimizer=ADAMW, data=NO_SHUFFLE),
    "manual_adamw": dict(nproc=2, sync="manual", optimizer=ADAMW, data=NO_SHUFFLE),
    "ddp_acc_sgd": dict(nproc=2, accumulation_steps=2, batch_size=4, optimizer=SGD, **CLIP_COSINE),
    "ddp_acc_adamw": dict(nproc=2, accumulation_steps=2, batch_size=4, optimizer=ADAMW, data=NO_SHUFFLE),
}
# the 1-rank references, and which 2-rank jobs each must equal
SINGLE = {
    "single_sgd_2": (dict(accumulation_steps=2, optimizer=SGD), ["ddp_sgd", "manual_sgd"]),
    "single_adamw_2": (dict(accumulation_steps=2, optimizer=ADAMW, data=NO_SHUFFLE), ["ddp_adamw", "manual_adamw"]),
    "single_sgd_4": (dict(accumulation_steps=4, batch_size=4, optimizer=SGD, **CLIP_COSINE), ["ddp_acc_sgd"]),
    "single_adamw_4": (dict(accumulation_steps=4, batch_size=4, optimizer=ADAMW, data=NO_SHUFFLE), ["ddp_acc_adamw"]),
}
PAIRS = [(single, other) for single, (_, others) in SINGLE.items() for other in others]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("equivalence")
    dirs = {name: root / name for name in [*RANKS_2, *SINGLE, "resume_1x2"]}
    two = run_probe([{"spec": make_spec(**o), "run_dir": str(dirs[n])} for n, o in RANKS_2.items()], root, nproc=2)
    # Resume the DDP(2)×1 run from step 5 (mid-epoch) on one process × 2 micro-steps: same W×A.
    resume = make_spec(
        accumulation_steps=2, optimizer=SGD, resume_from=str(dirs["ddp_sgd"] / "checkpoints" / "step_00000005.pt")
    )
    one_jobs = [{"spec": make_spec(**o), "run_dir": str(dirs[n])} for n, (o, _) in SINGLE.items()]
    one = run_probe([*one_jobs, {"spec": resume, "run_dir": str(dirs["resume_1x2"])}], root, nproc=1)
    assert all(r["exit_code"] == 0 for r in two + one)
    return {"dirs": dirs, "allreduce_calls": {n: r["allreduce_calls"] for n, r in zip(RANKS_2, two, strict=True)}}


@pytest.mark.parametrize(("single", "other"), PAIRS)
def test_same_final_weights(runs, single, other):
    err = relative_error(final_weights(runs["dirs"][other]), final_weights(runs["dirs"][single]))
    assert err < 1e-5, f"{other} vs {single}: relative weight error {err:.2e}"
    # and training really moved the weights (the comparison is not of two untouched inits)
    init = load_checkpoint(runs["dirs"][single] / "checkpoints" / "step_00000005.pt")["model"]
    assert relative_error(final_weights(runs["dirs"][single]), init) > 1e-3


@pytest.mark.parametrize(("single", "other"), PAIRS)
def test_rank0_reduced_loss_equals_one_process_loss(runs, single, other):
    """train/loss (reduced over ranks and micro-batches on rank 0) == the one-process mean, every step."""
    a = metric_series(read_events(runs["dirs"][other]), "train/loss")
    b = metric_series(read_events(runs["dirs"][single]), "train/loss")
    assert sorted(a) == list(range(1, STEPS + 1)) == sorted(b)
    for step in a:
        assert a[step] == pytest.approx(b[step], rel=1e-5), step


@pytest.mark.parametrize(("single", "other"), PAIRS)
def test_distributed_validation_equals_one_process(runs, single, other):
    for name in ("val/loss", "val/accuracy"):
        a = metric_series(read_events(runs["dirs"][other]), name)
        b = metric_series(read_events(runs["dirs"][single]), name)
        assert sorted(a) == [5, 10, 15] == sorted(b)
        for step in a:
            assert a[step] == pytest.approx(b[step], rel=1e-5, abs=1e-7), (name, step)


def test_first_step_loss_matches_a_hand_computation(runs):
    """Step 1's train/loss is the initial model's mean cross-entropy on the layout's first global batch."""
    spec = JobSpec.model_validate(make_spec(nproc=2, optimizer=SGD))
    train_set, _ = build_datasets(spec.data, spec.seed)
    layout = BatchLayout(len(train_set), spec.batch_size, 1, 2, spec.seed, shuffle=True)
    torch.manual_seed(spec.seed)
    model = build_model(spec.model)
    x, y = train_set.__getitems__(layout.global_batch_indices(0))
    expected = F.cross_entropy(model(x), y).item()
    got = metric_series(read_events(runs["dirs"]["ddp_sgd"]), "train/loss")[1]
    assert got == pytest.approx(expected, rel=1e-6)


def test_ddp_all_reduces_once_per_optimizer_step(runs):
    """A comm hook counts gradient all-reduces: with 2 micro-steps DDP reduces exactly as often as with
    1 (no_sync on the first), i.e. once per bucket per optimizer step."""
    calls = runs["allreduce_calls"]
    assert calls["ddp_sgd"] > 0 and calls["ddp_sgd"] % STEPS == 0
    assert calls["ddp_acc_sgd"] == calls["ddp_sgd"]
    assert calls["ddp_acc_adamw"] == calls["ddp_adamw"] == calls["ddp_sgd"]
    assert calls["manual_sgd"] == 0  # no DDP wrapper there


def test_resume_on_another_world_size_ends_with_the_same_weights(runs):
    dirs = runs["dirs"]
    err = relative_error(final_weights(dirs["resume_1x2"]), final_weights(dirs["ddp_sgd"]))
    assert err < 1e-5, err
    started = [e for e in read_events(dirs["resume_1x2"]) if e["type"] == "started"][0]
    assert started["start_step"] == 5 and started["world_size"] == 1
    # it trained only the remaining 10 steps
    assert sorted(metric_series(read_events(dirs["resume_1x2"]), "train/loss")) == list(range(6, STEPS + 1))


def test_checkpoints_hold_the_unwrapped_model(runs):
    for name in ("ddp_sgd", "manual_sgd"):
        ckpt = load_checkpoint(Path(runs["dirs"][name]) / "checkpoints" / "step_00000015.pt")
        assert not any(k.startswith("module.") for k in ckpt["model"])
        assert ckpt["step"] == 15 and ckpt["epoch"] == 1 and ckpt["world_size"] == 2 and len(ckpt["rng"]) == 2
