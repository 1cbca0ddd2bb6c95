"""`python -m trainer --spec SPEC --run-dir DIR` (one process) or under
`torchrun --standalone --nproc_per_node=N -m trainer --spec SPEC --run-dir DIR`.

Exit codes: 0 finished; 75 stopped on SIGTERM after saving a checkpoint (resume with resume_from);
anything else failed (the `failed` event and torchrun's error file name the rank and traceback).
"""

from __future__ import annotations

import argparse
import sys

from torch.distributed.elastic.multiprocessing.errors import record


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, help="job spec file (.json, or .yaml/.yml)")
    parser.add_argument("--run-dir", required=True, help="run directory: events.jsonl, checkpoints/, spec.json go here")
    return parser.parse_args(argv)


@record
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from trainer.spec_file import load_spec
    from trainer.train import train

    return train(load_spec(args.spec), args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
