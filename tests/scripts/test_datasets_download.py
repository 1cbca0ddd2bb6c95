"""A built-in data set downloads once per host: two concurrent MNIST jobs with `download: true` and a
relative root (the datasets dir) fetch each file once; the second waits on the first's file lock.

Never the network: a fake MNIST in the real IDX format (gzip'd) is written by the test and served by a
local http.server; the ranks' torchvision is pointed at it by a sitecustomize on their PYTHONPATH
(MNIST.mirrors and the files' md5s), handed to them through RANKZERO_RANK_ENV.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.commands import ROOT

MIRROR_ENV = "RZ_TEST_MNIST_MIRROR"
SERVE_DELAY_S = 0.7  # per file: the second job arrives while the first is downloading

SITECUSTOMIZE = """
import json, os, sys
_CFG = os.environ.get("RZ_TEST_MNIST_MIRROR")
if _CFG:
    import importlib.abc, importlib.util

    class _PointMnistAtTheTestMirror(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "torchvision.datasets.mnist":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                cfg = json.loads(_CFG)
                module.MNIST.mirrors = [cfg["mirror"]]
                module.MNIST.resources = [tuple(r) for r in cfg["resources"]]

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _PointMnistAtTheTestMirror())
"""


def _images(n: int) -> bytes:
    pixels = bytes((i * 37 + j) % 256 for i in range(n) for j in range(28 * 28))
    return struct.pack(">IIII", 0x00000803, n, 28, 28) + pixels


def _labels(n: int) -> bytes:
    return struct.pack(">II", 0x00000801, n) + bytes(i % 10 for i in range(n))


def fake_mnist() -> dict[str, bytes]:
    """The four MNIST files (IDX, gzip'd) with 64 training and 16 test images."""
    raw = {
        "train-images-idx3-ubyte.gz": _images(64),
        "train-labels-idx1-ubyte.gz": _labels(64),
        "t10k-images-idx3-ubyte.gz": _images(16),
        "t10k-labels-idx1-ubyte.gz": _labels(16),
    }
    return {name: gzip.compress(data, mtime=0) for name, data in raw.items()}


class _Mirror:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.gets: Counter[str] = Counter()
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: bool) -> None:
                name = self.path.rsplit("/", 1)[-1]
                data = mirror.files.get(name)
                if data is None:
                    self.send_error(404)
                    return
                # torchvision first probes for redirects with a GET carrying a "Method: HEAD" header.
                body = body and self.headers.get("Method") != "HEAD"
                if body:
                    mirror.gets[name] += 1
                    time.sleep(SERVE_DELAY_S)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer(True)

            def do_HEAD(self) -> None:
                self._answer(False)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mnist/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()


@pytest.fixture
def mirror() -> Iterator[_Mirror]:
    m = _Mirror(fake_mnist())
    yield m
    m.server.shutdown()
    m.server.server_close()


def _spec(name: str) -> dict:
    return {
        "name": name,
        "model": {"name": "mlp", "args": {"in_features": 784, "hidden": 16}},
        "data": {"name": "mnist", "args": {"root": "mnist", "download": True}},
        "batch_size": 8,
        "max_steps": 2,
        "device": "cpu",
        "checkpoint": {"every_epochs": None},
    }


def test_mnist_downloads_once_for_two_concurrent_jobs(service, workers, mirror, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    resources = [(name, hashlib.md5(data).hexdigest()) for name, data in mirror.files.items()]
    settings, client = service(rank_env=MIRROR_ENV)
    workers.start(
        settings,
        pool="threads",
        concurrency=2,
        extra_env={
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]),
            MIRROR_ENV: json.dumps({"mirror": mirror.url, "resources": resources}),
        },
    )
    jobs = [client.submit(_spec(f"mnist-{i}")) for i in range(2)]
    root = settings.resolved_datasets_dir / "mnist"
    assert all(j["spec"]["data"]["args"]["root"] == str(root) for j in jobs)  # relative: the datasets dir
    done = [client.wait_terminal(j["id"], timeout=240) for j in jobs]
    assert [d["status"] for d in done] == ["succeeded", "succeeded"], done
    assert dict(mirror.gets) == {name: 1 for name in mirror.files}  # each file fetched once, not twice
    assert (root / ".rankzero-download.lock").exists()
    assert (root / "MNIST" / "raw" / "t10k-images-idx3-ubyte").exists()
