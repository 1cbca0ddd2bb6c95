"""Code bundle upload: pack + upload + submit of a 50 MB / 5,000-file tree, first vs second submit.

    .venv/bin/python bench/bundle_upload.py [--files 5000] [--mb 50]

A tree is generated in a temp dir (4/5 of the files small Python sources, 1/5 incompressible binary
files holding most of the bytes, and a .git folder that is never sent), a live API (uvicorn, SQLite,
embedded broker) is started in this process, and `rankzero submit --code` is run as cli/main.py runs
it (cli.code.upload_code, then POST /jobs), its phases timed from its HTTP requests: pack (collect
+ tar.gz), HEAD + upload (POST /api/code: streamed, hashed, every member checked), POST /jobs.
Rows: a submit without a bundle (baseline); the first submit; the second (the CLI remembers the
unchanged tree: no pack, no upload); the second from a machine without that memory (packs again, the
same sha256: uploads nothing).
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH_TOKEN = "rankzero-bench-token-0123456789abcdef0123456789"  # the API refuses short tokens
SPEC = {"name": "bench-code", "model": {"name": "mlp"}, "data": {"name": "digits"}, "max_steps": 3, "device": "cpu"}


def make_tree(root: Path, files: int, total_bytes: int) -> None:
    rng = random.Random(0)
    binaries = max(1, files // 5)
    sources = files - binaries
    source_bytes = min(total_bytes // 10, sources * 4000)
    per_source = max(1, source_bytes // max(1, sources))
    per_binary = (total_bytes - per_source * sources) // binaries
    line = "def f(x):\n    return x * 2  # some code\n"
    for i in range(sources):
        folder = root / f"pkg{i % 50}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i}.py").write_text((line * (per_source // len(line) + 1))[:per_source])
    for i in range(binaries):
        folder = root / "assets" / f"d{i % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"blob{i}.bin").write_bytes(rng.randbytes(per_binary))
    (root / ".git").mkdir()
    (root / ".git" / "packfile").write_bytes(rng.randbytes(1_000_000))  # never sent


def start_api(tmp: Path) -> str:
    import httpx
    import uvicorn

    from api.app import create_app
    from core.settings import Settings
    from tests.support.ports import free_port

    settings = Settings(
        data_dir=tmp / "data",
        runs_dir=tmp / "runs",
        database_url=f"sqlite:///{tmp / 'db.sqlite'}",
        broker_url=f"sqla+sqlite:///{tmp / 'broker.db'}",
        api_token=BENCH_TOKEN,
        queue=f"bench-{time.time_ns()}",
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{base}/api/health", timeout=1).status_code == 200:
                return base
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError("the API did not come up")


def submit_once(api, folder: Path | None, cache: Path) -> dict[str, float]:
    """One `rankzero submit [--code folder]`, as cli/main.py does it; phases timed from the HTTP requests."""
    import os

    from rich.console import Console

    from cli.code import upload_code

    os.environ["XDG_CACHE_HOME"] = str(cache)  # the CLI's memory of packed trees
    requests: list[tuple[float, str, str, int]] = []

    def seen(request) -> None:
        sent = int(request.headers.get("content-length") or 0) if request.method == "POST" else 0
        requests.append((time.perf_counter(), request.method, request.url.path, sent))

    api.http.event_hooks["request"] = [seen]
    spec = dict(SPEC)
    t0 = time.perf_counter()
    if folder is not None:
        spec["code"] = upload_code(api, folder, Console(file=io.StringIO()))
    t1 = time.perf_counter()
    api.post("/jobs", json=spec)
    t2 = time.perf_counter()
    first_head = next((t for t, method, _, _ in requests if method == "HEAD"), t1)
    sent = sum(n for _, method, path, n in requests if path.endswith("/code"))
    return {"pack": first_head - t0, "upload": t1 - first_head, "submit": t2 - t1, "total": t2 - t0, "sent": sent}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--mb", type=float, default=50)
    args = parser.parse_args()
    from cli.client import Api
    from core import bundles

    with tempfile.TemporaryDirectory(prefix="rankzero-bench-bundle-") as t:
        tmp = Path(t)
        tree = tmp / "tree"
        started = time.perf_counter()
        make_tree(tree, args.files, int(args.mb * 1e6))
        made = time.perf_counter() - started
        print(f"tree: {args.files:,} files, {args.mb:g} MB (+ a .git folder), made in {made:.1f} s")
        api = Api(start_api(tmp / "service"), BENCH_TOKEN, timeout=600)
        rows = [
            ("no bundle (baseline)", submit_once(api, None, tmp / "cache")),
            ("--code, first submit", submit_once(api, tree, tmp / "cache")),
            ("--code, second submit", submit_once(api, tree, tmp / "cache")),
            ("--code, 2nd, no CLI cache", submit_once(api, tree, tmp / "other-cache")),
        ]
        packed = bundles.pack(tree, tmp / "size.tar.gz")
    header = f"{'case':<27}{'pack s':>8}{'HEAD+upload s':>15}{'POST /jobs s':>14}{'total s':>9}{'uploaded MB':>13}"
    print(header)
    print("-" * len(header))
    for name, r in rows:
        print(
            f"{name:<27}{r['pack']:>8.2f}{r['upload']:>15.2f}{r['submit']:>14.3f}{r['total']:>9.2f}"
            f"{r['sent'] / 1e6:>13.1f}"
        )
    print(
        f"bundle: {packed.files:,} files, {packed.unpacked_bytes / 1e6:.1f} MB, {packed.bytes / 1e6:.1f} MB compressed"
    )
    print("pack: collect + tar.gz (the first) or collect + stat check (a tree unchanged since the last submit)")


if __name__ == "__main__":
    main()
