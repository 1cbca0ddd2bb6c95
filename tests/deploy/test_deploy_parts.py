"""The deployment's decisions, table-driven (no Docker): the GPU setting's words, the refusal of an
unresolvable rendezvous address, what docker-compose.yml and the Dockerfile promise (issues 21, 41), the
worker's seccomp profile, the setting a sandbox refusal names, and the image cache's inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from core.settings import Settings
from tests.deploy import image_cache
from worker import sandbox_diagnose as diagnose
from worker.host_address import address_problem

ROOT = Path(__file__).resolve().parents[2]
SANDBOX_CALLS = {"clone", "unshare", "mount", "umount2", "pivot_root"}


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [(None, None), ("all", None), (" ALL ", None), ("none", ""), ("", ""), ("0,1", "0,1"), ("2", "2")],
)
def test_gpus_words(raw: str | None, parsed: str | None) -> None:
    assert Settings(gpus=raw).gpus == parsed  # pyright: ignore[reportCallIssue]


def _resolve(known: dict[str, str]):
    def resolve(name: str) -> str:
        if name not in known:
            raise OSError(f"[Errno -2] Name or service not known: {name}")
        return known[name]

    return resolve


@pytest.mark.parametrize(
    ("host_address", "hostname", "known", "says"),
    [
        (None, "box", {"box": "10.0.0.5"}, None),
        ("10.0.0.7", "gpu-host-1", {"10.0.0.7": "10.0.0.7"}, None),  # the hostname need not resolve then
        (None, "gpu-host-1", {}, "RANKZERO_HOST_ADDRESS to an address"),
        ("gpu-b.example", "box", {"box": "10.0.0.5"}, "RANKZERO_HOST_ADDRESS='gpu-b.example' does not resolve"),
    ],
)
def test_address_problem(host_address: str | None, hostname: str, known: dict[str, str], says: str | None) -> None:
    problem = address_problem(host_address, hostname, _resolve(known))
    assert problem is None if says is None else says in (problem or "")


def test_compose_file_fixes() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "name" not in compose  # the project is the folder's name, or -p (docs/deploy.md)
    services = compose["services"]
    assert [n for n, s in services.items() if "build" in s] == ["migrate"]  # the image is built once
    images = {s.get("image") for n, s in services.items() if n in ("migrate", "api", "worker")}
    assert images == {"${RANKZERO_IMAGE:-rankzero:latest}"}
    worker = services["worker"]
    assert worker["environment"]["RANKZERO_GPUS"] == "${RANKZERO_GPUS:-all}"  # unset or empty: every GPU
    assert "memlock" not in worker.get("ulimits", {})
    assert "api" in services["api"]["command"] and "--port" not in services["api"]["command"]
    assert "PONG" in " ".join(services["redis"]["healthcheck"]["test"])
    for name in ("api", "worker"):
        assert services[name]["stop_grace_period"]


def test_image_honours_host_and_port() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "RANKZERO_PORT=8000" in text and "RANKZERO_HOST=0.0.0.0" in text
    assert '"--port", "8000"' not in text and "bubblewrap" in text


def test_worker_sandboxes_with_no_added_privilege() -> None:
    worker = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["worker"]
    assert "cap_add" not in worker and not worker.get("privileged")
    assert worker["security_opt"] == ["seccomp=./deploy/seccomp/worker.json", "systempaths=unconfined",
                                      "apparmor=unconfined"]  # fmt: skip
    assert "user" not in worker  # the image's rankzero (uid 1000): bwrap makes a user namespace
    assert "\nUSER rankzero" in (ROOT / "Dockerfile").read_text()


def test_seccomp_profile_is_dockers_default_plus_the_sandbox_calls() -> None:
    profile = json.loads((ROOT / "deploy/seccomp/worker.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    ours = [r for r in profile["syscalls"] if r.get("comment", "").startswith("rankzero:")]
    assert len(ours) == 1 and set(ours[0]["names"]) == SANDBOX_CALLS and ours[0]["action"] == "SCMP_ACT_ALLOW"
    assert not ours[0].get("args") and not ours[0].get("includes") and not ours[0].get("excludes")
    # Docker's own rules: the sandbox's calls only with CAP_SYS_ADMIN (never granted), clone without namespace
    # flags (or on s390), clone3 ENOSYS (libc falls back to clone).
    for rule in profile["syscalls"]:
        if rule is ours[0] or rule["action"] != "SCMP_ACT_ALLOW" or not SANDBOX_CALLS & set(rule["names"]):
            continue
        gated = rule.get("includes", {}).get("caps") == ["CAP_SYS_ADMIN"]
        masked = rule["names"] == ["clone"] and rule.get("args", [{}])[0].get("op") == "SCMP_CMP_MASKED_EQ"
        assert gated or masked, rule
    assert {"bpf", "setns", "keyctl", "add_key", "io_uring_setup"}.isdisjoint(
        n for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" and not r.get("includes") for n in r["names"]
    )


CONTAINER = diagnose.HostFacts(in_container=True, max_user_namespaces=15000)
NO_USERNS = (
    "bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged "
    "user namespaces."
)


@pytest.mark.parametrize(
    ("error", "facts", "names"),
    [
        (NO_USERNS, CONTAINER, "seccomp=./deploy/seccomp/worker.json"),
        ("bwrap: pivot_root: Operation not permitted", CONTAINER, "seccomp=./deploy/seccomp/worker.json"),
        ("bwrap: Can't mount proc on /newroot/proc: Operation not permitted", CONTAINER, "systempaths=unconfined"),
        ("bwrap: Failed to make / slave: Permission denied", CONTAINER, "apparmor=unconfined"),
        (NO_USERNS, diagnose.HostFacts(in_container=True, max_user_namespaces=0), "user.max_user_namespaces"),
        (
            NO_USERNS,
            diagnose.HostFacts(in_container=False, unprivileged_userns_clone=0),
            "kernel.unprivileged_userns_clone",
        ),
        (
            "bwrap: setting up uid map: Permission denied",
            diagnose.HostFacts(in_container=False, apparmor_restrict_userns=1),
            "apparmor_restrict_unprivileged_userns",
        ),  # fmt: skip
        (NO_USERNS, diagnose.HostFacts(in_container=False, max_user_namespaces=15000), None),  # bwrap's words say it
        ("bwrap: execvp true: No such file or directory", CONTAINER, None),
    ],
)
def test_missing_setting(error: str, facts: diagnose.HostFacts, names: str | None) -> None:
    said = diagnose.missing_setting(error, facts)
    assert said is None if names is None else names in (said or ""), said


@pytest.mark.parametrize(
    ("dockerfile", "sources"),
    [
        ("COPY pyproject.toml ./\nCOPY --from=web /web/vendor ./web/static/vendor", ["pyproject.toml"]),
        ("COPY web/package.json web/package-lock.json ./", ["web/package.json", "web/package-lock.json"]),
        ("COPY --chown=1000:1000 core ./core\n# COPY commented ./x", ["core"]),
        ("RUN echo COPY x y \\\n && true\nADD README.md /app/", ["README.md"]),
    ],
)
def test_copied_sources(dockerfile: str, sources: list[str]) -> None:
    assert image_cache.copied_sources(dockerfile) == sources


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("core/x.py", False),
        ("core/__pycache__/x.cpython-311.pyc", True),
        ("web/static/vendor/uPlot.js", True),
        ("web/static/app.js", False),
        ("api/deep/m.pyc", True),
        ("tests/x.py", True),
    ],  # fmt: skip
)
def test_dockerignore(path: str, ignored: bool) -> None:
    patterns = image_cache.ignore_patterns((ROOT / ".dockerignore").read_text())
    assert image_cache.is_ignored(path, patterns) is ignored


def test_image_tag_follows_what_the_build_copies(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM x\nCOPY pyproject.toml ./\nCOPY core ./core\n")
    (tmp_path / ".dockerignore").write_text("**/__pycache__\ndocs\n")
    (tmp_path / "core/__pycache__").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "core/a.py").write_text("a = 1\n")
    first = image_cache.tag(tmp_path)
    assert first.startswith("rankzero:in-")
    (tmp_path / "core/__pycache__/a.pyc").write_bytes(b"x")  # ignored by the build
    (tmp_path / "README.md").write_text("not copied\n")
    assert image_cache.tag(tmp_path) == first
    (tmp_path / "core/a.py").write_text("a = 2\n")
    assert image_cache.tag(tmp_path) != first


def test_stale_tags() -> None:
    tags = ["rankzero:latest", "rankzero:in-aaa", "rankzero:in-bbb", "rankzero-standin/x:1", "rankzero:in-ccc"]
    assert image_cache.stale(tags, keep="rankzero:in-bbb") == ["rankzero:in-aaa", "rankzero:in-ccc"]
