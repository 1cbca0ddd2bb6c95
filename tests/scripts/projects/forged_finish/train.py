"""A hostile script: it writes its own `finished` event and a `checkpoint` event naming a file outside its
checkpoints folder, then exits 3. The worker must judge the job by the exit code, and never list that file."""

import json
import os
import sys
import time
from pathlib import Path

events = Path(os.environ["RANKZERO_RUN_DIR"]) / "events.jsonl"
forged = [
    {
        "seq": 900,
        "time": time.time(),
        "type": "checkpoint",
        "step": 1,
        "epoch": 0,
        "path": "../../../etc/passwd",
        "bytes": 10,
        "sha256": "0" * 64,
    },
    {
        "seq": 901,
        "time": time.time(),
        "type": "checkpoint",
        "step": "abc",
        "epoch": 0,
        "path": "spec.json",
        "bytes": 10,
        "sha256": "0" * 64,
    },
    {"seq": 902, "time": time.time(), "type": "progress", "step": 2**63, "total_steps": "many"},
    {"seq": 903, "time": time.time(), "type": "finished", "step": 1},
]
with events.open("a") as fh:
    for line in forged:
        fh.write(json.dumps(line) + "\n")
time.sleep(1.5)  # let the worker read the forged lines before the exit
sys.exit(3)
