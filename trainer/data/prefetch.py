"""A built-in data set's download, done by the worker before a sandboxed attempt's ranks start (issue 19):
the ranks see the datasets dir read-only, so no job can change the files another job reads; the files
must therefore be there before they start.

    python -m trainer.data.prefetch <spec.json>     (worker/launch.py `prefetch_data`)

Only torchvision's own download code runs here, under the once-per-host lock (trainer/data/download.py),
never the job's code: a user data factory cannot be fetched this way (it runs in the sandbox and writes
under its run dir). The ranks then find the files and skip the download (FETCHED_ENV).
"""

from __future__ import annotations

import json
import sys

from trainer.data.download import FETCHED_ENV, wants_download

__all__ = ["FETCHED_ENV", "main", "wants_download"]


def main(argv: list[str]) -> int:
    from trainer.catalogue import DATA
    from trainer.spec import JobSpec

    if len(argv) != 1:
        print("usage: python -m trainer.data.prefetch <spec.json>", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        spec = JobSpec.model_validate(json.load(fh))
    entry = DATA.get(spec.data.name)
    if entry is None or not entry.downloads:
        return 0  # nothing built-in to fetch
    args = entry.args(spec.data.args)
    if args.get("download"):
        from trainer.data.datasets import BUILDERS  # torch and torchvision: only when there is something to fetch

        try:
            BUILDERS[spec.data.name](args, spec.seed)
        except (OSError, RuntimeError, ValueError) as exc:
            print(f"rankzero: {exc}", file=sys.stderr, flush=True)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
