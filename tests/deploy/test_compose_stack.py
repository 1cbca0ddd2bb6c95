"""The deployment as users run it, on Compose v2 (`docker compose`, v2.40.3 from PyPI: compose_v2.py):
the project's Dockerfile built unmodified by `up -d --build` (the README's command) with its own
docker-compose.yml, plus tests/deploy/override.yml for what this machine lacks (no bridge: host
networking and free ports; no GPU). The worker's security settings are the file's: no capability, the
shipped seccomp profile, systempaths and AppArmor unconfined. Then, by REST: the worker's stand-in GPUs
are listed; a 2-rank CPU job runs in the sandbox (its ranks in namespaces of their own), its metrics and
a checkpoint download check out; `stop worker` checkpoints and requeues it, `start worker` resumes it and
it ends at the weights of an uninterrupted run; a second worker container runs an `nnodes: 2` job with the
first. And the worker refuses to start, naming the setting, where one of the three is missing.

Docker, its daemon and the stand-in base images come from tests/deploy/docker_host.py. The project's
image is built once per set of inputs (image_cache.py: `rankzero:in-<hash>`); a run that finds its tag
skips the build. `make test` starts that set-up (and the image's `docker compose build`) in the background
before pytest (tests/machine.py); the fixture waits for it to end, then does what is left, if anything.
Only this test's compose project (its containers and volumes) is removed afterwards.
Durations go to stdout (`pytest -s`) and test-output/deploy_timings.json.
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

from tests import machine
from tests.deploy import compose_v2, docker_host, image_cache
from tests.support.jobs import assert_same_weights, wait
from tests.support.ports import free_port

# One Docker daemon and one stack for the module; a cold image build alone takes ~12 min.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docker"), pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
FILES = ["-f", "docker-compose.yml", "-f", "tests/deploy/override.yml"]
TIMINGS = ROOT / "test-output" / "deploy_timings.json"
ENDED = {"succeeded", "failed", "cancelled"}

SPEC: dict[str, Any] = {
    "name": "compose-ddp",
    "nproc": 2,
    "device": "cpu",
    "max_steps": 2000,  # long enough that `stop worker` lands mid-run on a loaded machine
    "batch_size": 16,
    "log_every": 10,
    "eval_every": 1000,
    "data": {"name": "digits"},
    "model": {"name": "mlp"},
    "checkpoint": {"every_steps": 300, "every_epochs": None, "keep_last": 5},
}


class Stack:
    def __init__(self, docker_config: Path) -> None:
        self.project = f"rzt{uuid.uuid4().hex[:10]}"
        self.second_host = f"{self.project}-gpu-host-2"
        self.api_port = free_port()
        self.env = os.environ | {
            "DOCKER_CONFIG": str(docker_config),  # `docker compose` is the pinned v2 plugin
            "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
            "REDIS_PASSWORD": secrets.token_urlsafe(16),
            "RANKZERO_API_TOKEN": secrets.token_urlsafe(32),
            "RZ_TEST_API_PORT": str(self.api_port),
            "RZ_TEST_PG_PORT": str(free_port()),
            "RZ_TEST_REDIS_PORT": str(free_port()),
        }
        for name in (
            "RANKZERO_GPUS",
            "RANKZERO_HOST_NAME",
            "RANKZERO_HOST_ADDRESS",
            "COMPOSE_FILE",
            "COMPOSE_PROJECT_NAME",
        ):
            self.env.pop(name, None)  # what the test checks comes from the file's defaults
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{self.api_port}/api",
            headers={"Authorization": f"Bearer {self.env['RANKZERO_API_TOKEN']}"},
            timeout=30,
        )

    def command(self, *args: str) -> list[str]:
        return ["docker", "compose", *FILES, "-p", self.project, *args]

    def run(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(*args), cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip
        if check:
            assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}\n{self.logs()}"
        return done

    def logs(self) -> str:
        done = self.run("logs", "--no-color", "--tail", "60", check=False, timeout=120)
        return done.stdout[-20000:]

    def job(self, job_id: int) -> dict[str, Any]:
        return self.http.get(f"/jobs/{job_id}").json()

    def submit(self, spec: dict[str, Any]) -> int:
        created = self.http.post("/jobs", json=spec)
        assert created.status_code == 201, created.text
        return int(created.json()["id"])

    def ended(self, job_id: int, timeout: float, what: str) -> dict[str, Any]:
        return wait(lambda: (j := self.job(job_id))["status"] in ENDED and j, timeout, what, every=1)


@pytest.fixture(scope="module")
def timings() -> Iterator[dict[str, float]]:
    found: dict[str, float] = {}
    yield found
    TIMINGS.parent.mkdir(exist_ok=True)
    TIMINGS.write_text(json.dumps(found, indent=2))
    print("\ndeploy timings (s):", json.dumps(found))


@pytest.fixture(scope="module")
def stack(timings: dict[str, float]) -> Iterator[Stack]:
    t0 = time.monotonic()
    machine.wait_for_start()  # `make test` builds the image in the background before pytest starts
    timings["waited_for_the_background_build_s"] = round(time.monotonic() - t0, 1)
    stop_engine = docker_host.ensure_engine()
    docker_config = compose_v2.install()
    assert compose_v2.version(docker_config) == compose_v2.VERSION
    built = docker_host.ensure_bases()
    timings["engine_compose_and_bases_s"] = round(time.monotonic() - t0, 1)
    timings["bases_built"] = len(built)
    s = Stack(docker_config)
    try:
        t1 = time.monotonic()
        # The image is named by its inputs (RANKZERO_IMAGE), not rankzero:latest: another checkout's test on
        # the same daemon builds and runs its own.
        s.env["RANKZERO_IMAGE"] = cached = image_cache.tag(ROOT)
        if docker_host.image_exists(cached):  # these very inputs were built before: no build
            s.run("up", "-d", timeout=900)
            timings["image_built"] = 0
        else:
            s.run("up", "-d", "--build", timeout=3600)  # the README's command (+ the override)
            timings["image_built"] = 1
            docker_host.remove_stale_tags(cached)
        timings["up_s"] = round(time.monotonic() - t1, 1)
        wait(lambda: _answers(s), 180, "the API's /api/health", every=1)
        yield s
    finally:
        try:
            subprocess.run(["docker", "rm", "-f", s.second_host], capture_output=True, timeout=120)
            s.run("down", "-v", "--remove-orphans", "-t", "30", check=False)
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


def test_worker_container_has_no_added_privilege(stack: Stack) -> None:
    cid = stack.run("ps", "-q", "worker").stdout.strip()
    inspect = json.loads(subprocess.run(["docker", "inspect", cid], capture_output=True, text=True, timeout=60).stdout)
    host = inspect[0]["HostConfig"]
    assert host["Privileged"] is False and not host["CapAdd"], host["CapAdd"]
    opts = host["SecurityOpt"]
    assert "apparmor=unconfined" in opts, opts
    # systempaths=unconfined: Compose v2 hands the engine empty masked and read-only /proc paths.
    assert host["MaskedPaths"] == [] and host["ReadonlyPaths"] == [], (host["MaskedPaths"], host["ReadonlyPaths"])
    # Compose hands the engine the profile itself: the shipped file's rule for the sandbox's calls.
    profile = json.loads(next(o for o in opts if o.startswith("seccomp="))[len("seccomp=") :])
    assert profile == json.loads((ROOT / "deploy/seccomp/worker.json").read_text())
    assert inspect[0]["Config"]["User"] == "rankzero"


# The job's processes as the worker container sees them: each one's pid and network namespace beside the
# worker's own (pid 1): a sandboxed rank's differ (bwrap: --unshare-pid, --unshare-net for one node).
NAMESPACES = """
import json, os
def ns(pid, kind):
    try: return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError: return None
ranks = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid(): continue  # this script's text names the trainer too
    try: cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError: continue
    if b"trainer" in b" ".join(cmd) and b"bwrap" not in cmd[0]:
        ranks.append({"pid": ns(pid, "pid"), "net": ns(pid, "net")})
print(json.dumps({"worker": {"pid": ns(1, "pid"), "net": ns(1, "net")}, "ranks": ranks}))
"""


def _namespaces(stack: Stack) -> dict[str, Any]:
    done = stack.run("exec", "-T", "worker", "python", "-c", NAMESPACES, check=False, timeout=60)
    return json.loads(done.stdout) if done.returncode == 0 else {"ranks": []}


def test_job_trains_sandboxed_checkpoints_stops_with_the_worker_and_resumes_to_the_same_weights(
    stack: Stack, tmp_path: Path, timings: dict[str, float]
) -> None:
    job_id = stack.submit(SPEC)
    seen = wait(lambda: len((n := _namespaces(stack))["ranks"]) >= 2 and n, 300, "the job's ranks", every=0.5)
    worker = seen["worker"]
    assert all(r["pid"] != worker["pid"] and r["net"] != worker["net"] for r in seen["ranks"]), seen
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
    done = stack.ended(job_id, 600, "the resumed job to end")
    assert done["status"] == "succeeded", (done, stack.logs())
    assert done["attempt"] == 2

    series = stack.http.get(f"/jobs/{job_id}/metrics", params={"name": "train/loss", "max_points": 100000}).json()
    loss = [p["step"] for p in series["series"][0]["points"]]
    assert loss[0] <= SPEC["log_every"] and loss[-1] >= SPEC["max_steps"] - SPEC["log_every"], loss[:3] + loss[-3:]

    final = stack.http.get(f"/jobs/{job_id}/checkpoints").json()[-1]
    assert final["step"] == SPEC["max_steps"]
    body = stack.http.get(f"/checkpoints/{final['id']}/download").content
    assert hashlib.sha256(body).hexdigest() == final["sha256"]
    (tmp_path / "final.pt").write_bytes(body)
    assert_same_weights(tmp_path / "final.pt", _reference_weights(tmp_path / "reference"))


def test_two_worker_containers_run_one_two_node_job(stack: Stack) -> None:
    # Another machine runs the same worker service with its own name and address (docs/deploy.md
    # "Several GPU hosts"); here it is the worker service again, a second container of this project
    # (the same database, broker and runs volume) with the second host's settings.
    stack.run("run", "-d", "--no-deps", "--name", stack.second_host, "-e", "RANKZERO_HOST_NAME=gpu-host-2",
              "-e", "RANKZERO_HOST_ADDRESS=127.0.0.2", "worker")  # fmt: skip
    wait(lambda: _host(stack, "gpu-host-2"), 180, "the second host's row", every=1)
    spec = SPEC | {"name": "compose-2-nodes", "nnodes": 2, "nproc": 1, "max_steps": 60,
                   "checkpoint": {"every_steps": 30, "every_epochs": None}}  # fmt: skip
    job_id = stack.submit(spec)
    done = stack.ended(job_id, 600, "the two-node job to end")
    assert done["status"] == "succeeded", (done, stack.logs())
    placement = json.dumps(done.get("placement") or done)
    assert "gpu-host-1" in placement and "gpu-host-2" in placement, placement


SECURITY = {"seccomp": "seccomp=deploy/seccomp/worker.json", "systempaths": "systempaths=unconfined",
            "apparmor": "apparmor=unconfined"}  # fmt: skip


@pytest.mark.parametrize(
    ("dropped", "named"),
    [("seccomp", "seccomp=./deploy/seccomp/worker.json"), ("systempaths", "systempaths=unconfined")],
)
def test_worker_refuses_to_start_naming_the_missing_setting(stack: Stack, dropped: str, named: str) -> None:
    """The worker's image run as the compose file runs it but for one security setting left out (as a
    host or an edited file would): it exits at start, and its refusal names what to set. (AppArmor: this
    host has none to refuse.)"""
    cid = stack.run("ps", "-q", "worker").stdout.strip()
    image = subprocess.run(["docker", "inspect", "--format", "{{.Image}}", cid], capture_output=True,
                           text=True, timeout=60).stdout.strip()  # fmt: skip
    opts = [a for key, opt in SECURITY.items() if key != dropped for a in ("--security-opt", opt)]
    name = f"{stack.project}-refused-{dropped}"
    cmd = ["docker", "run", "--rm", "--name", name, "--network", "host", *opts, "-e",
           "RANKZERO_HOST_ADDRESS=127.0.0.1", image, "rankzero", "worker"]  # fmt: skip
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    finally:  # a worker that did start runs on: end it
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "SandboxUnavailable" in out, out[-4000:]
    assert named in out, out[-4000:]


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
