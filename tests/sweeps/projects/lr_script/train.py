"""A script job a sweep varies: `--lr` comes from the entrypoint (`${params.lr}`), and the script checks the
SDK's `rankzero.params()` says the same. It reports a loss that is best at lr 0.05."""

import argparse
import sys
import time

import rankzero

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
params = rankzero.params()
if abs(float(params["lr"]) - args.lr) > 1e-12 * max(1.0, abs(args.lr)):
    sys.exit(f"rankzero.params() says lr {params['lr']}, the command line {args.lr}")
for step in range(1, args.steps + 1):
    rankzero.log(step, {"score": (args.lr - 0.05) ** 2 + 1.0 / step, "seen/lr": float(params["lr"])})
    rankzero.progress(step, args.steps)
    if rankzero.should_stop():
        rankzero.flush()
        sys.exit(rankzero.EXIT_STOPPED)
    time.sleep(0.1)
rankzero.flush()
