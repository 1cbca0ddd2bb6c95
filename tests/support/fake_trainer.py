"""A torch-free stand-in for `python -m trainer` (tests only): same command line, same run-dir
contract (events.jsonl on rank 0 with increasing seq, checkpoints, exit 75 after SIGTERM).

Workers started with the fake trainer run it as `-m tests.support.fake_trainer`
(RANKZERO_TRAINER_MODULE). Behaviour from the spec's params (plain scalars any job may carry; a built-in model takes
only its own args): step_s (sleep per step),
fail_rank + fail_at_step (raise), hang_rank + hang_at_step (sleep forever), pid_dir (each rank
writes its pid there).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

stop = False


def on_term(signum, frame):
    global stop
    stop = True


class FakeRun:
    def __init__(self, spec: dict, run: Path) -> None:
        self.spec = spec
        self.run = run
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.args = spec.get("params") or {}
        self.events = run / "events.jsonl"
        self.seq = 0
        if self.events.exists():
            lines = [json.loads(x) for x in self.events.read_text().splitlines() if x.strip()]
            self.seq = lines[-1]["seq"] + 1 if lines else 0

    def write_pid(self) -> None:
        if self.args.get("pid_dir"):
            # A relative pid_dir is inside the run dir: the one folder a sandboxed job shares with the host.
            pid_dir = self.events.parent / self.args["pid_dir"]
            pid_dir.mkdir(parents=True, exist_ok=True)
            (pid_dir / f"{os.getpid()}").write_text(
                f"{self.rank} {os.environ.get('CUDA_VISIBLE_DEVICES', '-')} {time.time()}"
            )

    def emit(self, kind: str, **fields: object) -> None:
        if self.rank != 0:
            return
        with open(self.events, "a") as fh:
            fh.write(json.dumps({"seq": self.seq, "time": time.time(), "type": kind, **fields}) + "\n")
        self.seq += 1

    def checkpoint(self, step: int) -> str:
        rel = f"checkpoints/step_{step:08d}.pt"
        if self.rank == 0:
            data = json.dumps({"step": step, "weights": [1.0 / (step + 1)] * 64}).encode()
            (self.run / "checkpoints").mkdir(exist_ok=True)
            tmp = self.run / (rel + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(self.run / rel)
            self.emit(
                "checkpoint", step=step, epoch=0, path=rel, bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
            )
        return rel

    def misbehave(self, step: int) -> None:
        """Hang or fail at this step when the spec says so."""
        args = self.args
        if args.get("hang_rank") == self.rank and step >= args.get("hang_at_step", 0):
            while True:
                time.sleep(1)
        if args.get("fail_rank") == self.rank and step >= args.get("fail_at_step", 0):
            raise RuntimeError(f"boom at step {step}")

    def train(self, start: int, total: int) -> int:
        every = (self.spec.get("checkpoint") or {}).get("every_steps") or 0
        step_s = float(self.args.get("step_s", 0.02))
        for step in range(start + 1, total + 1):
            if stop:
                rel = self.checkpoint(step - 1)
                self.emit("stopped", step=step - 1, checkpoint=rel, reason="SIGTERM")
                return 75
            self.misbehave(step)
            time.sleep(step_s)
            self.emit("metric", step=step, name="train/loss", value=2.0 / step)
            self.emit(
                "progress",
                step=step,
                total_steps=total,
                epoch=0,
                samples=step * 8,
                samples_per_s=100.0,
                eta_s=(total - step) * step_s,
            )
            if every and step % every == 0:
                self.checkpoint(step)
        self.checkpoint(total)
        self.emit("finished", step=total)
        return 0

    def fail(self, exc: Exception) -> int:
        err = os.environ.get("TORCHELASTIC_ERROR_FILE")
        if err:
            Path(err).parent.mkdir(parents=True, exist_ok=True)
            Path(err).write_text(
                json.dumps(
                    {
                        "message": {
                            "message": f"{type(exc).__name__}: {exc}",
                            "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))},
                        }
                    }
                )
            )
        traceback.print_exc()
        self.emit(
            "failed",
            error=f"{type(exc).__name__}: {exc}",
            rank=self.rank,
            traceback=traceback.format_exc().splitlines()[-5:],
        )
        return 1


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--spec", required=True)
    p.add_argument("--run-dir", required=True)
    a = p.parse_args()
    spec = json.loads(Path(a.spec).read_text())
    run = FakeRun(spec, Path(a.run_dir))
    run.write_pid()
    signal.signal(signal.SIGTERM, on_term)
    total = int(spec.get("max_steps") or 20)
    start = 0
    if spec.get("resume_from"):
        start = json.loads(Path(spec["resume_from"]).read_text())["step"]
    run.emit("started", world_size=run.world, nproc=run.world, nnodes=1, strategy="fake", device="cpu",
             backend="gloo", precision="fp32", total_steps=total, global_batch_size=spec["batch_size"] * run.world,
             start_step=start, resumed_from=spec.get("resume_from"))  # fmt: skip
    try:
        return run.train(start, total)
    except Exception as exc:
        return run.fail(exc)


if __name__ == "__main__":
    sys.exit(main())
