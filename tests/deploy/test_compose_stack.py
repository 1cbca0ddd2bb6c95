"""The deployment as users run it: the project's Dockerfile built unmodified and its own
docker-compose.yml brought up with `up -d --build` (the README's command), plus tests/deploy/override.yml
for what this machine lacks (no bridge: host networking and free ports; no NVIDIA runtime). Then, by
REST: a 2-rank CPU job trains (metrics, a checkpoint whose download has the listed sha256); `stop
worker` checkpoints and requeues it, `start worker` resumes it and it ends at the weights of an
uninterrupted run; the worker's stand-in nvidia-smi GPUs are listed with RANKZERO_GPUS unset; a second
worker container as a second host runs an `nnodes: 2` job with the first.

Docker, its daemon and the stand-in base images come from tests/deploy/docker_host.py (installed,
started and built where absent; a daemon it started is stopped at the end). Only this test's compose
project (its containers and volumes) is removed afterwards; the images stay cached, so a warm run
rebuilds only the code layers. Durations go to stdout (`pytest -s`) and test-output/deploy_timings.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy import docker_host
from tests.support.jobs import wait
from tests.support.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(5400)]  # a cold image build alone takes ~12 min

ROOT = Path(__file__).resolve().parents[2]
FILES = ["-f", "docker-compose.yml", "-f", "tests/deploy/override.yml"]
TIMINGS = ROOT / "test-output" / "deploy_timings.json"

SPEC: dict[str, Any] = {
    "name": "compose-ddp",
    "nproc": 2,
    "device": "cpu",
    "max_steps": 3000,
    "batch_size": 16,
    "log_every": 10,
    "eval_every": 1000,
    "data": {"name": "digits"},
    "model": {"name": "mlp"},
    "checkpoint": {"every_steps": 1000, "every_epochs": None, "keep_last": 5},
}


class Stack:
    def __init__(self) -> None:
        self.project = f"rzt{uuid.uuid4().hex[:10]}"
        self.second_host = f"{self.project}_gpu-host-2"
        self.api_port = free_port()
        self.env = os.environ | {
            "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
            "REDIS_PASSWORD": secrets.token_urlsafe(16),
            "RANKZERO_API_TOKEN": secrets.token_urlsafe(32),
            "RZ_TEST_API_PORT": str(self.api_port),
            "RZ_TEST_PG_PORT": str(free_port()),
            "RZ_TEST_REDIS_PORT": str(free_port()),
        }
        for name in ("RANKZERO_GPUS", "RANKZERO_HOST_NAME", "RANKZERO_HOST_ADDRESS", "COMPOSE_FILE"):
            self.env.pop(name, None)  # what the test checks comes from the file's defaults
        self.compose = docker_host.compose_command()
        self.files = FILES
        self.tmp = Path()
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{self.api_port}/api",
            headers={"Authorization": f"Bearer {self.env['RANKZERO_API_TOKEN']}"},
            timeout=30,
        )

    def v1_files(self, tmp: Path, env: dict[str, str]) -> list[str]:
        """Compose v1 (docker-py) cannot express two things of the file: it refuses `ports` with host
        networking (v2 ignores them), and it hands `systempaths=unconfined` to the engine, which rejects
        it (v2 turns it into empty masked and read-only paths). So on v1 the test runs the two files as
        compose itself merges them (`config`), less the API's ports, with `privileged` standing in for
        `systempaths=unconfined` (what the job sandbox needs: a fresh /proc). Everything else is as merged."""
        import yaml

        cmd = [*self.compose, *FILES, "config"]
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        merged = yaml.safe_load(done.stdout)
        merged["services"]["api"].pop("ports", None)
        for service in merged["services"].values():
            opts = service.get("security_opt") or []
            if "systempaths=unconfined" in opts:
                service["security_opt"] = [o for o in opts if o != "systempaths=unconfined"]
                service["privileged"] = True
        path = tmp / f"compose-{uuid.uuid4().hex[:8]}.yml"
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(merged))  # the passwords are in it: owner-only, in the test's tmp dir
        return ["-f", str(path), "--project-directory", str(ROOT)]

    def run(self, *args: str, files: list[str] | None = None, timeout: float = 600) -> str:
        cmd = [*self.compose, *(files or self.files), "-p", self.project, *args]
        done = subprocess.run(cmd, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}\n{self.logs()}"
        return done.stdout

    def logs(self) -> str:
        cmd = [*self.compose, *self.files, "-p", self.project, "logs", "--no-color", "--tail", "60"]
        done = subprocess.run(cmd, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120)
        return done.stdout[-20000:]

    def job(self, job_id: int) -> dict[str, Any]:
        return self.http.get(f"/jobs/{job_id}").json()


@pytest.fixture(scope="module")
def timings() -> Iterator[dict[str, float]]:
    found: dict[str, float] = {}
    yield found
    TIMINGS.parent.mkdir(exist_ok=True)
    TIMINGS.write_text(json.dumps(found, indent=2))
    print("\ndeploy timings (s):", json.dumps(found))


@pytest.fixture(scope="module")
def stack(timings: dict[str, float], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    t0 = time.monotonic()
    stop_engine = docker_host.ensure_engine()
    built = docker_host.ensure_bases()
    timings["engine_and_bases_s"] = round(time.monotonic() - t0, 1)
    timings["bases_built"] = len(built)
    s = Stack()
    tmp = tmp_path_factory.mktemp("compose")
    if s.compose == ["docker-compose"]:
        s.files = s.v1_files(tmp, s.env)
    s.tmp = tmp
    try:
        t1 = time.monotonic()
        s.run("up", "-d", "--build", timeout=3600)  # the README's command (+ the override)
        timings["up_build_s"] = round(time.monotonic() - t1, 1)
        wait(lambda: _answers(s), 180, "the API's /api/health", every=1)
        yield s
    finally:
        try:
            subprocess.run(["docker", "rm", "-f", s.second_host], capture_output=True, timeout=120)
            subprocess.run([*s.compose, *s.files, "-p", s.project, "down", "-v", "--remove-orphans",
                            "-t", "30"], cwd=ROOT, env=s.env, capture_output=True, timeout=600)  # fmt: skip
        finally:
            s.http.close()
            stop_engine()
            timings["total_s"] = round(time.monotonic() - t0, 1)


def _answers(s: Stack) -> bool:
    try:
        return s.http.get("/health").status_code == 200
    except httpx.HTTPError:
        return False


def _host(s: Stack, name: str) -> dict[str, Any] | None:
    return next((h for h in s.http.get("/hosts").json() if h["name"] == name and h.get("alive", True)), None)


def test_worker_lists_every_gpu_it_sees_when_gpus_is_unset(stack: Stack) -> None:
    host = wait(lambda: _host(stack, "gpu-host-1"), 180, "the worker's host row", every=1)
    assert host["gpus"] == ["0", "1"], host  # the stand-in nvidia-smi's two; unset means all of them


def test_healthchecks_pass(stack: Stack) -> None:
    def healthy() -> bool:
        label = f"label=com.docker.compose.project={stack.project}"
        out = subprocess.run(["docker", "ps", "--filter", label, "--format", "{{.Names}} {{.Status}}"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        rows = [line for line in out.stdout.splitlines() if line.strip()]
        return len(rows) == 4 and all("(healthy)" in r for r in rows)

    wait(healthy, 240, "api, worker, postgres and redis healthy", every=2)


def test_job_trains_checkpoints_stops_with_the_worker_and_resumes_to_the_same_weights(
    stack: Stack, tmp_path: Path, timings: dict[str, float]
) -> None:
    created = stack.http.post("/jobs", json=SPEC)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    wait(lambda: (j := stack.job(job_id))["status"] == "running" and j["step"] >= 20, 300, "training", every=0.2)

    t0 = time.monotonic()
    stack.run("stop", "worker", timeout=300)  # a deploy: SIGTERM, ranks checkpoint, the job goes back
    timings["stop_worker_s"] = round(time.monotonic() - t0, 1)
    stopped = stack.job(job_id)
    assert stopped["status"] == "queued", stopped
    stop_step = stopped["step"]
    assert 0 < stop_step < SPEC["max_steps"]
    steps = [c["step"] for c in stack.http.get(f"/jobs/{job_id}/checkpoints").json()]
    assert stop_step in steps, (stop_step, steps)  # the SIGTERM checkpoint

    stack.run("start", "worker", timeout=300)
    done = wait(lambda: (j := stack.job(job_id))["status"] in {"succeeded", "failed", "cancelled"} and j, 600,
                "the resumed job to end", every=1)  # fmt: skip
    assert done["status"] == "succeeded", (done, stack.logs())
    assert done["attempt"] == 2

    series = stack.http.get(f"/jobs/{job_id}/metrics", params={"name": "train/loss", "max_points": 100000}).json()
    loss = [p["step"] for p in series["series"][0]["points"]]
    assert loss[0] <= 10 and loss[-1] >= SPEC["max_steps"] - SPEC["log_every"], loss[:3] + loss[-3:]

    final = stack.http.get(f"/jobs/{job_id}/checkpoints").json()[-1]
    assert final["step"] == SPEC["max_steps"]
    body = stack.http.get(f"/checkpoints/{final['id']}/download").content
    assert hashlib.sha256(body).hexdigest() == final["sha256"]
    (tmp_path / "final.pt").write_bytes(body)
    _assert_same_weights(tmp_path / "final.pt", _reference_weights(tmp_path / "reference"))


def test_two_worker_containers_run_one_two_node_job(stack: Stack) -> None:
    # Another machine would run the same worker service with its own name and address; here it is the
    # worker service again as `worker2` (compose v1's `run` cannot use host networking), in the same
    # project: the same database, broker and runs volume.
    import yaml

    if stack.compose != ["docker-compose"]:
        pytest.skip("the second host is set up through compose v1's merged file")
    env = stack.env | {"RANKZERO_HOST_NAME": "gpu-host-2"}
    merged_path = Path(stack.v1_files(stack.tmp, env)[1])
    merged = yaml.safe_load(merged_path.read_text())
    second = merged["services"].pop("worker")
    second.pop("depends_on", None)  # up --no-deps: the stack runs already
    second["environment"]["RANKZERO_HOST_ADDRESS"] = "127.0.0.2"  # gpu-host-1 is 127.0.0.1
    second["volumes"] = [v for v in second["volumes"] if "nvidia-smi" not in str(v)]
    merged["services"] = {"worker2": second}
    merged_path.write_text(yaml.safe_dump(merged))
    stack.run("up", "-d", "--no-deps", "worker2", files=["-f", str(merged_path), "--project-directory", str(ROOT)])
    wait(lambda: _host(stack, "gpu-host-2"), 180, "the second host's row", every=1)
    spec = SPEC | {"name": "compose-2-nodes", "nnodes": 2, "nproc": 1, "max_steps": 60,
                   "checkpoint": {"every_steps": 30, "every_epochs": None}}  # fmt: skip
    created = stack.http.post("/jobs", json=spec)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    done = wait(lambda: (j := stack.job(job_id))["status"] in {"succeeded", "failed", "cancelled"} and j, 600,
                "the two-node job to end", every=1)  # fmt: skip
    assert done["status"] == "succeeded", (done, stack.logs())
    placement = json.dumps(done.get("placement") or done)
    assert "gpu-host-1" in placement and "gpu-host-2" in placement, placement


def _reference_weights(tmp: Path) -> dict[str, Any]:
    """The final weights of an uninterrupted run of SPEC, trained here as one rank with 2 micro-batches
    a step (the same samples per step as 2 ranks)."""
    import torch

    from trainer.spec import JobSpec
    from trainer.train import train

    ref = SPEC | {"nproc": 1, "accumulation_steps": 2}
    assert train(JobSpec.model_validate(ref), tmp) == 0
    return torch.load(tmp / "checkpoints" / f"step_{SPEC['max_steps']:08d}.pt", map_location="cpu",
                      weights_only=True)["model"]  # fmt: skip


def _assert_same_weights(path: Path, reference: dict[str, Any]) -> None:
    import torch

    got = torch.load(path, map_location="cpu", weights_only=True)["model"]
    assert got.keys() == reference.keys()
    for key, value in reference.items():
        assert torch.allclose(got[key], value, rtol=1e-5, atol=1e-6), f"{key} differs from the uninterrupted run"
