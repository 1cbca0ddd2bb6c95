"""A script that breaks one of its job's quotas (tests/limits/test_limits_quotas.py): `runtime` runs on,
`disk` fills its run dir, `series` prints a flood of `KEY: NUMBER` lines, `longline` writes an events.jsonl
line that never ends. Each prints a line a second so it is never taken for stalled."""

import os
import signal
import sys
import time
from pathlib import Path

mode = sys.argv[1]
run_dir = Path(os.environ["RANKZERO_RUN_DIR"])
stopped = False


def on_term(signum, frame):
    global stopped
    stopped = True


signal.signal(signal.SIGTERM, on_term)
if mode == "disk":
    with open(run_dir / "blob.bin", "wb") as fh:
        for _ in range(3):
            fh.write(os.urandom(1 << 20))
elif mode == "series":
    # Each of 60 keys on several lines: the console reader makes a series only of a key that repeats.
    for r in range(4):
        for i in range(60):
            print(f"metric_{i}: {r}.5", flush=True)
    time.sleep(2)
    sys.exit(0)
elif mode == "longline":
    with open(run_dir / "events.jsonl", "ab") as fh:
        fh.write(b'{"seq": 0, "type": "metric", "name": "' + b"x" * (2 << 20))
for step in range(600):
    if stopped:
        print("stopping: got SIGTERM", flush=True)
        sys.exit(75)
    print(f"alive {step}", flush=True)
    time.sleep(0.25)
