"""Checkpoint uploads never hold training back (issue 22): a stand-in rank trains (CPU matmuls) and saves a
large checkpoint every N steps the SDK's way (atomic write, sha256 recorded in events.jsonl) while the
worker's shipper (worker/artifact_shipping.py) uploads each one to a live API in a process of its own.

Reports steps/s of: no checkpoints; checkpoints, not uploaded; checkpoints uploaded to the store, and the
ratios; then upload throughput (MB/s) of one checkpoint to each store: the API's disk, and S3 (moto's
server, in memory: a floor for the protocol's cost, not a real bucket). Not part of the suite.

Run: .venv/bin/python -m bench.checkpoint_upload [--mb 190] [--every 20] [--steps 200]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-" + "x" * 40

RANK = textwrap.dedent("""
    import hashlib, json, os, sys, time
    import torch
    run, steps, every, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    a = torch.randn(384, 384)
    blob = os.urandom(mb << 20) if every else b""
    os.makedirs(f"{run}/checkpoints", exist_ok=True)
    start, seq = time.perf_counter(), 0
    for step in range(1, steps + 1):
        for _ in range(8):
            a = torch.tanh(a @ a) * 0.5
        if every and step % every == 0:
            name = f"checkpoints/step_{step:08d}.pt"
            tmp = f"{run}/{name}.tmp"
            with open(tmp, "wb") as fh:
                fh.write(blob[:-8] + step.to_bytes(8, "big"))
            sha = hashlib.sha256(open(tmp, "rb").read()).hexdigest()
            os.replace(tmp, f"{run}/{name}")
            seq += 1
            with open(f"{run}/events.jsonl", "a") as ev:
                event = {"seq": seq, "type": "checkpoint", "step": step, "path": name, "sha256": sha}
                ev.write(json.dumps(event) + "\\n")
    print(steps / (time.perf_counter() - start))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _api(data: Path, extra: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "RANKZERO_DATA_DIR": str(data), "RANKZERO_API_TOKEN": TOKEN, "RANKZERO_PORT": str(port),
           "PYTHONPATH": str(ROOT), **extra}  # fmt: skip
    code = "from api.server import serve; from core.settings import Settings; serve(Settings())"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("the API did not start")


def _job(url: str) -> int:
    spec = {"name": "bench", "model": {"name": "mlp"}, "data": {"name": "digits"}, "device": "cpu", "max_steps": 1}
    r = httpx.post(f"{url}/api/jobs", json=spec, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    r.raise_for_status()
    return int(r.json()["id"])


def _train(run: Path, steps: int, every: int, mb: int, ship_to: str | None, job_id: int) -> float:
    from core.settings import Settings
    from trainer.run_dir import RunDir
    from worker.artifact_shipping import Shipper

    run.mkdir(parents=True)
    shipper = None
    if ship_to:
        settings = Settings(
            **{"api_url": ship_to, "api_token": TOKEN, "data_dir": run.parent / "worker", "ship_every_s": 0.5}
        )
        shipper = Shipper(settings, job_id, RunDir(run)).start()
    out = subprocess.run([sys.executable, "-c", RANK, str(run), str(steps), str(every), str(mb)], check=True,
                         capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    if shipper is not None:
        shipper.stop()
    return float(out.stdout.strip().splitlines()[-1])


def _throughput(url: str, job_id: int, mb: int, tmp: Path) -> float:
    path = tmp / f"blob-{mb}"
    path.write_bytes(os.urandom(mb << 20))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    start = time.perf_counter()
    with open(path, "rb") as fh:
        r = httpx.post(f"{url}/api/artifacts/jobs/{job_id}/files/checkpoints/step_00000001.pt", content=fh,
                       headers={"Authorization": f"Bearer {TOKEN}", "X-Content-SHA256": sha}, timeout=None)  # fmt: skip
    r.raise_for_status()
    return mb / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=190)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        api, url = _api(tmp / "api", {})
        try:
            job_id = _job(url)
            base = _train(tmp / "none", args.steps, 0, 0, None, job_id)
            local = _train(tmp / "local", args.steps, args.every, args.mb, None, job_id)
            shipped = _train(tmp / "shipped", args.steps, args.every, args.mb, url, job_id)
            print(f"steps/s  no checkpoints {base:.2f}  checkpoints {local:.2f}  checkpoints uploaded {shipped:.2f}")
            print(
                f"ratio uploaded / no checkpoints {shipped / base:.3f}   uploaded / not uploaded {shipped / local:.3f}"
            )
            print(f"upload to the API's disk: {_throughput(url, job_id, args.mb, tmp):.0f} MB/s ({args.mb} MB)")
        finally:
            api.terminate()
            api.wait(30)
        _s3(tmp, args.mb)


def _s3(tmp: Path, mb: int) -> None:
    port = _free_port()
    moto = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    try:
        import boto3

        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k",
                     aws_secret_access_key="s").create_bucket(Bucket="bench")  # fmt: skip
        s3 = {"RANKZERO_ARTIFACT_STORE": "s3://bench/rz", "RANKZERO_S3_ENDPOINT_URL": endpoint,
              "RANKZERO_S3_ACCESS_KEY_ID": "k", "RANKZERO_S3_SECRET_ACCESS_KEY": "s"}  # fmt: skip
        api, url = _api(tmp / "api-s3", s3)
        try:
            print(f"upload to S3 (moto, via the API): {_throughput(url, _job(url), mb, tmp):.0f} MB/s ({mb} MB)")
        finally:
            api.terminate()
            api.wait(30)
    finally:
        moto.terminate()
        moto.wait(30)


if __name__ == "__main__":
    main()
