"""The API's request-head guard, h11 vs httptools + api/connections.py (issue 19 item 3).

For each HTTP parser the API as `rankzero api` serves it (api.server.serve; h11 with its own
h11_max_incomplete_event_size, or the default httptools protocol with api/connections.py's
guard) in a process of its own: how soon a 64 MiB header is cut off and how much the server grew,
/api/health's worst latency meanwhile, and requests per second on one kept-alive
connection (a path answered 404 without the database). Run: .venv/bin/python -m bench.api_head
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-" + "x" * 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _start(http: str | None, data: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    extra = f", http={http!r}" if http else ""
    code = f"from api.server import serve; from core.settings import Settings; serve(Settings(){extra})"
    env = {**os.environ, "RANKZERO_DATA_DIR": str(data), "RANKZERO_API_TOKEN": TOKEN, "RANKZERO_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    for _ in range(600):
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1).status_code == 200:
                return proc, port
        time.sleep(0.1)
    raise RuntimeError("the API did not start")


def _huge_header(port: int, pid: int) -> tuple[float, float, float, int]:
    rss0 = _rss_mb(pid)
    worst, stop = [0.0], threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=60) as c:
            while not stop.is_set():
                t0 = time.monotonic()
                c.get(f"http://127.0.0.1:{port}/api/health")
                worst[0] = max(worst[0], time.monotonic() - t0)
                time.sleep(0.05)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    sock = socket.create_connection(("127.0.0.1", port))
    sent, t0 = 0, time.monotonic()
    with contextlib.suppress(OSError):
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        while sent < 64 << 20:
            sock.sendall(b"a" * (1 << 20))
            sent += 1 << 20
        sock.sendall(b"\r\n\r\n")
        sock.settimeout(120)
        sock.recv(100)
    let_go = time.monotonic() - t0
    grown = _rss_mb(pid) - rss0
    time.sleep(0.5)
    stop.set()
    t.join(timeout=120)
    sock.close()
    return let_go, grown, worst[0], sent


def _rate(port: int, n: int = 1000) -> float:
    """Requests per second on one kept-alive connection, to a path the router answers 404 (no database)."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as c:
        c.get("/nope")
        t0 = time.monotonic()
        for _ in range(n):
            c.get("/nope")
        return n / (time.monotonic() - t0)


def main() -> None:
    runs = [("httptools + guard (default)", None), ("h11", "h11")] * 2  # interleaved: a loaded host drifts
    for label, http in runs:
        with tempfile.TemporaryDirectory() as tmp:
            proc, port = _start(http, Path(tmp))
            try:
                rate = _rate(port)
                let_go, grown, worst, sent = _huge_header(port, proc.pid)
                print(f"{label:28s} 64 MiB header: let go after {let_go:.2f} s ({sent >> 20} MiB sent), "
                      f"RSS +{grown:.1f} MiB, health worst {worst * 1000:.0f} ms; "
                      f"404s {rate:.0f} req/s")  # fmt: skip
            finally:
                os.killpg(proc.pid, 9)
                proc.wait()


if __name__ == "__main__":
    main()
