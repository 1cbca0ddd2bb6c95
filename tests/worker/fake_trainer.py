"""A torch-free stand-in for `python -m trainer` (tests only): same command line, same run-dir
contract (events.jsonl on rank 0 with increasing seq, checkpoints, exit 75 after SIGTERM).

Behaviour from the spec's model.args: step_s (sleep per step), fail_rank + fail_at_step (raise),
hang_rank + hang_at_step (sleep forever), pid_dir (each rank writes its pid there).
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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--spec", required=True)
    p.add_argument("--run-dir", required=True)
    a = p.parse_args()
    spec = json.loads(Path(a.spec).read_text())
    run = Path(a.run_dir)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = spec["model"]["args"]
    if args.get("pid_dir"):
        Path(args["pid_dir"]).mkdir(parents=True, exist_ok=True)
        (Path(args["pid_dir"]) / f"{os.getpid()}").write_text(
            f"{rank} {os.environ.get('CUDA_VISIBLE_DEVICES', '-')} {time.time()}"
        )
    signal.signal(signal.SIGTERM, on_term)
    events = run / "events.jsonl"
    seq = 0
    if events.exists():
        lines = [json.loads(x) for x in events.read_text().splitlines() if x.strip()]
        seq = lines[-1]["seq"] + 1 if lines else 0

    def emit(kind: str, **fields: object) -> None:
        nonlocal seq
        if rank != 0:
            return
        with open(events, "a") as fh:
            fh.write(json.dumps({"seq": seq, "time": time.time(), "type": kind, **fields}) + "\n")
        seq += 1

    def checkpoint(step: int) -> str:
        rel = f"checkpoints/step_{step:08d}.pt"
        if rank == 0:
            data = json.dumps({"step": step, "weights": [1.0 / (step + 1)] * 64}).encode()
            (run / "checkpoints").mkdir(exist_ok=True)
            tmp = run / (rel + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(run / rel)
            emit("checkpoint", step=step, epoch=0, path=rel, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        return rel

    total = int(spec.get("max_steps") or 20)
    start = 0
    if spec.get("resume_from"):
        start = json.loads(Path(spec["resume_from"]).read_text())["step"]
    emit("started", world_size=world, nproc=world, nnodes=1, strategy="fake", device="cpu", backend="gloo",
         precision="fp32", total_steps=total, global_batch_size=spec["batch_size"] * world, start_step=start,
         resumed_from=spec.get("resume_from"))  # fmt: skip
    every = (spec.get("checkpoint") or {}).get("every_steps") or 0
    step_s = float(args.get("step_s", 0.02))
    try:
        for step in range(start + 1, total + 1):
            if stop:
                rel = checkpoint(step - 1)
                emit("stopped", step=step - 1, checkpoint=rel, reason="SIGTERM")
                return 75
            if args.get("hang_rank") == rank and step >= args.get("hang_at_step", 0):
                while True:
                    time.sleep(1)
            if args.get("fail_rank") == rank and step >= args.get("fail_at_step", 0):
                raise RuntimeError(f"boom at step {step}")
            time.sleep(step_s)
            emit("metric", step=step, name="train/loss", value=2.0 / step)
            emit(
                "progress",
                step=step,
                total_steps=total,
                epoch=0,
                samples=step * 8,
                samples_per_s=100.0,
                eta_s=(total - step) * step_s,
            )
            if every and step % every == 0:
                checkpoint(step)
        checkpoint(total)
        emit("finished", step=total)
        return 0
    except Exception as exc:
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
        emit(
            "failed",
            error=f"{type(exc).__name__}: {exc}",
            rank=rank,
            traceback=traceback.format_exc().splitlines()[-5:],
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
