"""The artifact store's tests: a live API and real workers posing as hosts (tests/cluster's `start_host`),
some with a runs dir of their own; and a real S3-protocol server (moto's standalone server, a process of
its own on a free port, stopped by its pid) for the S3 back-end.

- `s3_server`: the endpoint URL of a fresh moto server (bucket `rz-test` created).
- `project(name)`: a copy of tests/storage/projects/<name>; `upload(client, folder)`: its bundle's ref.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import start_host  # noqa: F401 (a fixture these tests use)
from tests.scripts.conftest import upload  # noqa: F401 (a fixture these tests use)
from tests.support.jobs import USER_CODE
from tests.support.ports import free_port, wait_port
from tests.support.procs import stop_group
from tests.support.services import DEFAULT_SETTINGS, ServiceOptions

PROJECTS = Path(__file__).parent / "projects"
BUCKET = "rz-test"
S3_KEYS = {"s3_access_key_id": "testing", "s3_secret_access_key": "testing", "s3_region": "us-east-1"}


@pytest.fixture
def service_options() -> ServiceOptions:
    return ServiceOptions(
        settings={**DEFAULT_SETTINGS, "cancel_grace_s": 5.0, "allowed_code": USER_CODE, "ship_every_s": 0.3},
        fake_trainer=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        target = tmp_path / "projects" / name
        shutil.copytree(PROJECTS / name, target)
        return target

    return copy


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[str]:
    """moto's S3 server in a process of its own (stopped by pid at the end), with bucket BUCKET."""
    port = free_port()
    server = Path(sys.executable).with_name("moto_server")
    with open(tmp_path / "moto.log", "wb") as log:
        proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        wait_port(port, up=True, timeout=60)
        url = f"http://127.0.0.1:{port}"
        s3_client(url).create_bucket(Bucket=BUCKET)
        yield url
    finally:
        stop_group(proc, signal.SIGTERM, timeout=10)


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")  # fmt: skip
