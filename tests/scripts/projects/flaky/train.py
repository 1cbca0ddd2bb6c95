"""Fails on its first attempt, after leaving a note in the working folder; the restart finds the note."""

import os
import sys

attempt = int(os.environ["RANKZERO_ATTEMPT"])
if attempt == 1:
    with open("note.txt", "w") as fh:
        fh.write("written by attempt 1\n")
    print("attempt 1: giving up", file=sys.stderr, flush=True)
    sys.exit(3)
with open("note.txt") as fh:
    print(f"attempt {attempt} read: {fh.read().strip()}", flush=True)
