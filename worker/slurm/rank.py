"""`python -m worker.slurm.rank`: one rank of a rankzero job, started by `srun` (no torchrun).

In this order, because a signal that arrives while Python imports torch (10–20 s on a busy node) would
otherwise kill the task (one sent while the interpreter itself starts waits blocked: the batch script starts the
rank under `env --block-signal`; seen in testing: a requeued job warned at once died of the signal):
1. handlers for SIGTERM (cancel, preemption) and SIGUSR1 (Slurm's "time is nearly up", `--signal`) that
   only note the request; SIGUSR1 is turned into a SIGTERM to ourselves, the trainer's stop signal;
2. the environment torchrun would have given the rank, from Slurm's (`rank_environment`);
3. the heavy imports; a stop noted meanwhile ends the rank with 75 (stopped, resumable) before it trains,
   or, once the trainer's own handler is installed, is handed to it (it checkpoints and exits 75).

A script job (spec `entrypoint`) runs in this process (`runpy`), with the same environment torchrun gives:
a torchrun-style script runs as-is. A Python exception in it is written as torchrun's error file, so the
worker's diagnosis (worker/errors.py) names the failing rank and its traceback either way.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

from worker.slurm import samples

EXIT_STOPPED = 75  # trainer/exit_codes.py (not imported: this module runs before anything heavy)
LAUNCH_FILE = "slurm_launch.json"  # in the run dir: a script job's argv and working folder (the agent writes it)
WARNED_LINE = b"rankzero: Slurm's warning signal (USR1: time limit near, or preemption): checkpointing, then stopping\n"
_stop_requested = False


def _note_stop(signum: int, frame: FrameType | None) -> None:
    global _stop_requested
    _stop_requested = True


def _warned(signum: int, frame: FrameType | None) -> None:
    """SIGUSR1: checkpoint and stop, as on SIGTERM (whoever handles SIGTERM now: us, or the trainer)."""
    _note_stop(signum, frame)
    os.write(2, WARNED_LINE)  # the rank's stderr says why it stopped (a time limit near, or a preemption)
    os.kill(os.getpid(), signal.SIGTERM)


def install_early_handlers() -> None:
    """Our handlers, then the signals unblocked: the batch script starts the rank with SIGTERM and SIGUSR1
    blocked (`env --block-signal`) so that one sent while the interpreter starts waits, pending, for them."""
    signal.signal(signal.SIGTERM, _note_stop)
    signal.signal(signal.SIGUSR1, _warned)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGUSR1})


def rank_environment(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """What torchrun would tell a rank, from what Slurm tells a task (ValueError naming what is missing)."""
    try:
        rank, local, world = int(environ["SLURM_PROCID"]), int(environ["SLURM_LOCALID"]), int(environ["SLURM_NTASKS"])
        nodes, node = (
            int(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or 1),
            int(environ.get("SLURM_NODEID", "0")),
        )
    except (KeyError, ValueError) as exc:
        raise ValueError(f"not a Slurm task (srun sets SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS): {exc}") from None
    per_node = max(1, world // max(1, nodes))
    out = {
        "RANK": str(rank),
        "LOCAL_RANK": str(local),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(per_node),
        "GROUP_RANK": str(node),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": environ.get("MASTER_ADDR", "127.0.0.1"),
        "MASTER_PORT": environ.get("MASTER_PORT", "29500"),
        "TORCHELASTIC_RUN_ID": f"slurm-{environ.get('SLURM_JOB_ID', '0')}",
    }
    run_dir, attempt = environ.get("RANKZERO_RUN_DIR"), environ.get("RANKZERO_ATTEMPT")
    if run_dir and attempt:
        out["TORCHELASTIC_ERROR_FILE"] = os.path.join(
            run_dir, "logs", f"attempt_{int(attempt)}", str(rank), "error.json"
        )
    return out


def script_resume_env(run_dir: str) -> dict[str, str]:
    """RANKZERO_RESUME_FROM (rankzero/env.py) for a script: the checkpoint its spec resumes from, as
    worker/slurm/prepare.py resolved it in the shared runs dir for this attempt (the hosts worker's
    `script_job_env`); without it `rankzero.load_checkpoint()` would start a resumed job from scratch."""
    import json

    try:  # prepare writes it before srun; a rank started without it has nothing to resume
        with open(os.path.join(run_dir, "spec.json")) as fh:
            given = json.load(fh).get("resume_from")
    except FileNotFoundError:
        return {}
    return {"RANKZERO_RESUME_FROM": given} if isinstance(given, str) and given else {}


def _write_error_file(exc: BaseException) -> None:
    """torchrun's error file for a script's exception (the built-in trainer's @record writes its own)."""
    import json
    import time
    import traceback

    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):
        return
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    body = {"message": {"message": f"{type(exc).__name__}: {exc}", "extraInfo": {"py_callstack": text,
            "timestamp": str(int(time.time()))}}}  # fmt: skip
    try:
        with open(path, "w") as fh:
            json.dump(body, fh)
    except OSError:
        pass


def _run_script(run_dir: str) -> int:
    import json
    import runpy

    with open(os.path.join(run_dir, LAUNCH_FILE)) as fh:
        launch = json.load(fh)
    os.environ.update(script_resume_env(run_dir))
    argv, cwd = [str(a) for a in launch["argv"]], str(launch["cwd"])
    os.chdir(cwd)
    if _stop_requested:
        return EXIT_STOPPED
    # A script that handles SIGTERM itself (the SDK's `should_stop`) installs its handler; one that does not
    # is ended by it, as under torchrun.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path.insert(0, cwd)
        runner = lambda: runpy.run_module(argv[1], run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runner = lambda: runpy.run_path(argv[0], run_name="__main__")  # noqa: E731
    # A project may have a `worker` package of its own (a common name): ours, imported to get here, must not
    # stand in for it (the functions above keep their module's globals).
    for name in [m for m in sys.modules if m == "worker" or m.startswith("worker.")]:
        del sys.modules[name]
    try:
        runner()
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException as exc:
        _write_error_file(exc)
        raise
    return 0


def _run_trainer(run_dir: str) -> int:
    import torch  # noqa: F401  (the heavy import, under our handlers)

    from trainer import control

    if _stop_requested:
        print("rankzero: stop requested before training started; exiting resumable", file=sys.stderr, flush=True)
        return EXIT_STOPPED
    install = control.StopSignal.install

    def install_keeping_early_stop(self: control.StopSignal) -> None:
        install(self)
        if _stop_requested:  # arrived between our check and the trainer's handler
            self.requested = True

    control.StopSignal.install = install_keeping_early_stop  # type: ignore[method-assign]
    from trainer.__main__ import main as trainer_main
    from trainer.process_exit import exit_now

    code = int(trainer_main(["--spec", os.path.join(run_dir, "spec.json"), "--run-dir", run_dir]) or 0)
    exit_now(code)  # the trainer's record is on disk (its events closed, its final save waited for)
    return code  # only where exit_now is stubbed (tests)


def main() -> int:
    install_early_handlers()
    try:
        os.environ.update(rank_environment(os.environ))
    except ValueError as exc:
        print(f"rankzero: {exc}", file=sys.stderr)
        return 2
    run_dir = os.environ["RANKZERO_RUN_DIR"]
    samples.start(os.environ)  # local rank 0: this node's CPU/memory samples, as any host records them
    if os.path.exists(os.path.join(run_dir, LAUNCH_FILE)):
        return _run_script(run_dir)
    return _run_trainer(run_dir)


if __name__ == "__main__":
    sys.exit(main())
