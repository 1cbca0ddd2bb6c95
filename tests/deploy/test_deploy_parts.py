"""The deployment's decisions, table-driven (no Docker): the GPU setting's words, the refusal of an
unresolvable rendezvous address, and what docker-compose.yml and the Dockerfile promise for issue 21."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core.settings import Settings
from worker.host_address import address_problem

ROOT = Path(__file__).resolve().parents[2]


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
    assert "name" not in compose  # compose v1 refuses a top-level name
    services = compose["services"]
    assert [n for n, s in services.items() if "build" in s] == ["migrate"]  # the image is built once
    assert {s.get("image") for n, s in services.items() if n in ("migrate", "api", "worker")} == {"rankzero:latest"}
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
