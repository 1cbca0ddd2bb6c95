"""The batch script generator (worker/slurm/script.py) and the rank entry's environment (worker/slurm/rank.py):
pure, by tables."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from worker.slurm.rank import rank_environment
from worker.slurm.script import BatchJob, directives, render

pytestmark = pytest.mark.xdist_group("slurm")

BASE = {"pool": "gpu", "job_id": 7, "first_attempt": 1, "run_root": Path("/shared/runs/job_7"), "python": "/py",
        "nnodes": 1, "ntasks_per_node": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "present", "absent"),
    [
        ({}, ["--nodes=1", "--ntasks-per-node=1", "--requeue", "--signal=USR1@120", "--export=NONE",
              "--job-name=rankzero-gpu-7-1", "--open-mode=append"], ["--gpus-per-node", "--partition", "--nice"]),
        ({"nnodes": 2, "ntasks_per_node": 4, "gpus_per_node": 4}, ["--nodes=2", "--ntasks-per-node=4",
         "--gpus-per-node=4"], []),
        ({"partition": "gpu", "account": "team-a", "qos": "high", "time_limit_min": 90, "signal_margin_s": 300},
         ["--partition=gpu", "--account=team-a", "--qos=high", "--time=90", "--signal=USR1@300"], []),
        ({"nice": 900}, ["--nice=900"], []),
        ({"extra_options": ("--mem=4G", "--constraint=a100")}, ["--mem=4G", "--constraint=a100"], []),
    ],
)  # fmt: skip
def test_directives(fields: dict, present: list[str], absent: list[str]) -> None:
    lines = directives(BatchJob(**{**BASE, **fields}))
    text = "\n".join(lines)
    assert all(line.startswith("#SBATCH ") for line in lines)
    for option in present:
        assert f"#SBATCH {option}" in lines, option
    for option in absent:
        assert option not in text


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"nnodes": 0}, "nnodes"),
        ({"ntasks_per_node": 300}, "ntasks_per_node"),
        ({"gpus_per_node": 65}, "gpus_per_node"),
        ({"partition": "gpu; rm -rf /"}, "partition"),
        ({"account": "a b"}, "account"),
        ({"qos": "$(id)"}, "qos"),
        ({"pool": "x y"}, "pool"),
        ({"time_limit_min": 0}, "time_limit_min"),
        ({"signal_margin_s": 5}, "signal_margin_s"),
        ({"env": {"BAD NAME": "x"}}, "environment variable"),
        ({"extra_options": ("--mem=1G\nrm -rf /",)}, "one line"),
        ({"extra_options": ("mem=1G",)}, "starting with '--'"),
    ],
)
def test_refuses(fields: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        render(BatchJob(**{**BASE, **fields}))


def test_script_ends_with_the_ranks_status_and_requeues_only_a_resumable_stop() -> None:
    text = render(BatchJob(**BASE, env={"RANKZERO_RUN_DIR": "/shared/runs/job_7", "ODD": "it's $HOME `x`"}))
    lines = text.splitlines()
    assert lines[-1] == "exit $rc"  # never an echo's status
    srun = next(line for line in lines if line.startswith("srun "))
    assert "-m worker.slurm.rank" in srun and "torchrun" not in text and "torch.distributed.run" not in text
    assert "rc=$?" in lines[lines.index(srun) + 1]
    # Why they stopped decides a requeue (worker/slurm/stopped.py), never the script alone.
    assert 'if [ "$rc" -eq 75 ]; then' in text
    assert "-m worker.slurm.stopped --run-dir /shared/runs/job_7 --margin 120" in text
    assert "scontrol requeue" not in text
    assert "trap " in text  # Slurm's TERM to the batch step never ends it before `exit $rc`
    assert "export ODD='it'\"'\"'s $HOME `x`'" in text  # quoted: no shell expansion of values


def test_script_is_valid_bash_and_exits_with_the_ranks_status(tmp_path: Path) -> None:
    """The script run by bash with stand-ins for srun/scontrol: its status is srun's (3), not the echo's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 3\n")
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 127.0.0.1\n")
    for tool in ("srun", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(render(BatchJob(**{**BASE, "run_root": tmp_path, "python": "true"})))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS": "1"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 3, done.stderr
    assert "ranks exited 3" in done.stdout


@pytest.mark.parametrize(
    ("slurm", "expected"),
    [
        ({"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_NNODES": "1"},
         {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}),
        ({"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
          "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "23456"},
         {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
          "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "23456"}),
        ({"SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2",
          "RANKZERO_RUN_DIR": "/r", "RANKZERO_ATTEMPT": "3"},
         {"RANK": "1", "LOCAL_WORLD_SIZE": "1", "TORCHELASTIC_ERROR_FILE": "/r/logs/attempt_3/1/error.json"}),
    ],
)  # fmt: skip
def test_rank_environment(slurm: dict[str, str], expected: dict[str, str]) -> None:
    got = rank_environment(slurm)
    assert {k: got.get(k) for k in expected} == expected


def test_rank_environment_outside_slurm() -> None:
    with pytest.raises(ValueError, match="SLURM_PROCID"):
        rank_environment({"SLURM_NTASKS": "2"})


RANK_STARTS = """
import os, signal, sys
os.kill(os.getpid(), signal.SIGUSR1)  # the warning, sent while the rank's interpreter still starts
from worker.slurm import rank
rank.install_early_handlers()  # unblocks: the pending signal reaches our handler, not the default (death)
print("stop noted" if rank._stop_requested else "no stop", flush=True)
"""


def test_a_warning_sent_while_a_rank_starts_waits_for_its_handlers() -> None:
    """The batch script starts each rank with SIGTERM and SIGUSR1 blocked (`env --block-signal`, coreutils ≥ 8.31)."""
    root = Path(__file__).resolve().parents[2]
    guarded = ["env", "--block-signal=USR1", "--block-signal=TERM", sys.executable, "-c", RANK_STARTS]
    done = subprocess.run(guarded, cwd=root, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "stop noted"), done.stderr
    assert "Slurm's warning signal" in done.stderr
    bare = subprocess.run(guarded[3:], cwd=root, capture_output=True, text=True, timeout=60, check=False)
    assert bare.returncode == -signal.SIGUSR1  # what the guard prevents: the default action kills the rank


RANK_ENDS = """
import atexit, sys, threading, time
from trainer.process_exit import exit_now
atexit.register(lambda: print("interpreter teardown ran", flush=True))
writer = threading.Thread(target=lambda: (time.sleep(0.5), print("saved", end=" ")))  # a checkpoint being written
writer.start()
print("trainer returned", end=" ")  # buffered: exit_now flushes it
exit_now(75)
"""


def test_a_rank_whose_trainer_returned_exits_without_the_interpreters_teardown() -> None:
    """Gloo may abort a rank (exit 134) whose process-group objects Python frees at exit while a peer's connection
    closes (DDP holds them in reference cycles, so they live until the interpreter's teardown): the built-in
    trainer's rank exits with the trainer's code at once, once its own threads (a checkpoint's writer) are done, its
    output flushed."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", RANK_ENDS], cwd=root, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (75, "trainer returned saved "), done.stderr
