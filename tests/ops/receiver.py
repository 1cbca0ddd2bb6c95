"""A webhook receiver a test starts: records every POST (headers, raw body) and answers the status the
test scripted for the first calls (then 200)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self, statuses: list[int] | None = None) -> None:
        self.calls: list[tuple[dict[str, str], bytes, int]] = []
        self.statuses = list(statuses or [])
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with owner.lock:
                    code = owner.statuses.pop(0) if owner.statuses else 200
                    owner.calls.append(({k.lower(): v for k, v in self.headers.items()}, raw, code))
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:  # the base class names it so
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/secret-path"
        # A short poll: `close` (shutdown) waits for the loop to look, 0.5 s a receiver by default.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
