"""The test tiers (tests/conftest.py): what `make test-fast` leaves out."""

from __future__ import annotations

import pytest

from tests.conftest import is_slow


@pytest.mark.parametrize(
    ("node_id", "fixtures", "markers", "slow"),
    [
        ("tests/scheduler/test_placement.py::test_x", {"tmp_path"}, set(), False),
        ("tests/api/test_api_jobs.py::test_x[sqlite]", {"api_settings", "sqlite_url"}, set(), False),
        ("tests/api/test_api_jobs.py::test_x", {"live_api"}, set(), True),
        ("tests/worker/test_x.py::test_y", {"service", "workers"}, set(), True),
        ("tests/web/test_pages.py::test_x", {"page"}, set(), True),
        ("tests/api/test_api_jobs.py::test_x[postgres]", {"pg_url"}, {"postgres"}, True),
        ("tests/worker/test_x.py::test_y", set(), {"redis"}, True),
        ("tests/x.py::test_y", set(), {"slow"}, True),
        ("tests/trainer/test_trainer_cli.py::test_anything", {"tmp_path"}, set(), True),
        ("tests/limits/test_limits_paths.py::test_trainer_refuses_a_download_root", set(), set(), True),
        ("tests/limits/test_limits_paths.py::test_image_folder_needs_a_path", set(), set(), False),
        ("tests/cluster/test_anything.py::test_y", set(), set(), True),
        ("tests/security/test_sandbox.py::test_y", {"launch_probe"}, set(), True),
    ],
)
def test_what_is_slow(node_id: str, fixtures: set[str], markers: set[str], slow: bool) -> None:
    assert is_slow(node_id, fixtures, markers) is slow
