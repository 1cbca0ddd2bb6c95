"""A stand-in rank for the launcher tests: writes its environment to <run-dir>/env_rank_<RANK>.json.

Run as `torchrun ... -m limits_env_probe --spec SPEC --run-dir DIR` (the worker's command line).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--run-dir", required=True)
    args = parser.parse_args()
    out = Path(args.run_dir) / f"env_rank_{os.environ.get('RANK', 'x')}.json"
    out.write_text(json.dumps(dict(os.environ)))


if __name__ == "__main__":
    main()
