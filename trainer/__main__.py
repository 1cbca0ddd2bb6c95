"""`python -m trainer --spec SPEC --run-dir DIR` (one process) or under
`torchrun --standalone --nproc_per_node=N -m trainer --spec SPEC --run-dir DIR`.
"""

from __future__ import annotations

import argparse

from torch.distributed.elastic.multiprocessing.errors import record

from trainer.exit_codes import EXIT_OK, EXIT_STOPPED

EXIT_CODES = f"""exit codes (trainer/exit_codes.py):
  {EXIT_OK:<5}  finished
  {EXIT_STOPPED:<5}  stopped on SIGTERM after saving a checkpoint (resume with resume_from)
  other  failed (the `failed` event and torchrun's error file name the rank and traceback)
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trainer",
        description=__doc__,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--spec", required=True, help="job spec file (.json, or .yaml/.yml)")
    parser.add_argument("--run-dir", required=True, help="run directory: events.jsonl, checkpoints/, spec.json go here")
    return parser.parse_args(argv)


@record
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from trainer.spec_file import load_spec
    from trainer.train import train

    try:
        spec = load_spec(args.spec)
    except Exception as exc:  # a supervisor reading only events.jsonl still learns why
        _report_bad_spec(args.run_dir, exc)
        raise
    return train(spec, args.run_dir)


def _report_bad_spec(run_dir: str, exc: BaseException) -> None:
    import os
    import time
    from pathlib import Path

    from trainer.events import EventLog
    from trainer.failures import report_failure
    from trainer.run_dir import RunDir

    rank = int(os.environ.get("RANK", "0"))
    events = EventLog(RunDir(Path(run_dir)).events, enabled=rank == 0)
    try:
        report_failure(Path(run_dir), rank, 1, exc, events, since=time.time())
    finally:
        events.close()


if __name__ == "__main__":
    from trainer.process_exit import exit_now

    exit_now(int(main() or 0))  # no interpreter teardown: gloo's objects are never freed while a peer closes
