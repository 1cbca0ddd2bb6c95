"""Says it is ready, then hangs without a word (a deadlocked collective, say)."""

import time

print("ready", flush=True)
time.sleep(3600)
