"""A job for the sandbox tests, run by torchrun in place of the trainer (RANKZERO_TRAINER_MODULE=
tests.support.sandbox_job). It reads `<run dir>/probe.json` (what to try), writes what it could do
to `<run dir>/probe_rank<R>.json`, and then ends as told.

probe.json: {"read": [paths], "write": [paths], "pids": [host pids to signal], "secrets": [strings to
look for in every /proc/*/environ], "escape": {"token": str, "mb": int} | null,
"listen": true (a TCP listener on every interface, its port in the result), "stay_s": seconds before
the end, "end": 0 | 3 | "hang"}
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

ESCAPEE = """
import sys, time
block = bytearray(int(sys.argv[2]) * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1  # touch every page: resident, counted
while True:
    time.sleep(1)
"""


def _try_read(path: str) -> str:
    try:
        Path(path).read_bytes()
        return "read"
    except OSError as exc:
        return type(exc).__name__


def _try_write(path: str) -> str:
    try:
        Path(path).write_text("changed by a job")
        return "written"
    except OSError as exc:
        return type(exc).__name__


def _try_signal(pid: int) -> str:
    try:
        os.kill(pid, 0)
        return "signalled"
    except OSError as exc:
        return type(exc).__name__


def _environ_secrets(secrets: list[str]) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                env = (entry / "environ").read_bytes().decode(errors="replace")
            except OSError:
                continue
            found += [s for s in secrets if s in env]
    return sorted(set(found))


def _escape(token: str, mb: int) -> None:
    """A process that leaves the job: a new session, a double fork, an empty environment. Returns once the
    escapee has exec'd (its cmdline carries the token): the pipe's write end is close-on-exec, so its EOF
    here is the exec itself, not a guess at how long it takes."""
    exec_done, exec_signal = os.pipe()  # both non-inheritable: closed by execve
    if os.fork() == 0:
        os.close(exec_done)
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, "-c", ESCAPEE, token, str(mb)], {})
        os._exit(0)
    os.close(exec_signal)
    os.wait()
    while os.read(exec_done, 1):  # EOF once the escapee exec'd (or died) and the middle child exited
        pass
    os.close(exec_done)


def main() -> int:
    run_dir = Path(os.environ["RANKZERO_RUN_DIR"])
    rank = int(os.environ.get("RANK", "0"))
    ask = json.loads((run_dir / "probe.json").read_text())
    result: dict[str, object] = {
        "read": {p: _try_read(p) for p in ask.get("read", [])},
        "write": {p: _try_write(p) for p in ask.get("write", [])},
        "signal": {str(p): _try_signal(p) for p in ask.get("pids", [])},
        "environ_secrets": _environ_secrets(ask.get("secrets", [])),
        "pid": os.getpid(),
    }
    listener = None
    if ask.get("listen"):
        listener = socket.create_server(("0.0.0.0", 0))
        result["listen_port"] = listener.getsockname()[1]
    if rank == 0 and ask.get("escape"):
        _escape(ask["escape"]["token"], int(ask["escape"]["mb"]))
    tmp = run_dir / f"probe_rank{rank}.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(run_dir / f"probe_rank{rank}.json")
    time.sleep(float(ask.get("stay_s", 0)))
    end = ask.get("end", 0)
    while end == "hang":
        time.sleep(1)
    return int(end)


if __name__ == "__main__":
    sys.exit(main())
