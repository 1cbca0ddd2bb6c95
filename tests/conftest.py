"""The suite's shared fixtures live in tests/support (see its __init__ for the map); loaded here for every folder.

The tiers: `make test` runs everything; `make test-fast` runs `-m "not slow"`, the tests that start no
server, browser, worker or torchrun. A test is `slow` when it asks for a fixture that starts one
(`SERVICE_FIXTURES`, directly or through another fixture), carries a marker that needs one
(`SERVICE_MARKERS`), is marked `slow` by hand, or is listed in `LAUNCHES_PROCESSES` (tests that start
the trainer, torchrun, the CLI or a server themselves, or that wait out real time: a whole file, or
`file::test_name`).
"""

from __future__ import annotations

import os
import tempfile

import pytest

pytest_plugins = [
    "tests.support.databases",
    "tests.support.settings",
    "tests.support.services",
    "tests.support.servers",
    "tests.support.browser",
    "tests.support.parallel",
]

# Fixtures that start a process or need a server: the API, Celery workers, `rankzero up`, Redis /
# PostgreSQL servers of a test's own, a database on the shared PostgreSQL, chromium (tests/support);
# a served API (tests/security), sandboxed job processes (tests/security/test_sandbox, test_rendezvous).
SERVICE_FIXTURES = frozenset({
    "live_api", "workers", "service", "web_service", "redis_server", "pg_cluster", "pg_url",
    "browser", "new_page", "page", "served_api", "launch_probe", "launch_node",
})  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    # A developer's saved `rankzero login` profile must not reach the tests (cli/client.py `config_dir`):
    # every CLI the suite starts, in-process or as a subprocess, looks in an empty folder of its own.
    os.environ["RANKZERO_CONFIG_DIR"] = tempfile.mkdtemp(prefix="rankzero-test-config-")


SERVICE_MARKERS = frozenset({"postgres", "redis", "browser"})
LAUNCHES_PROCESSES = (
    "tests/trainer/test_trainer_cli.py",
    "tests/trainer/test_trainer_torchrun.py",
    "tests/trainer/test_trainer_equivalence.py",
    "tests/trainer/test_trainer_speed.py",
    "tests/sdk/test_sdk_torchrun.py",
    "tests/limits/test_limits_rank_env.py",
    "tests/limits/test_limits_paths.py::test_trainer_refuses_",
    "tests/limits/test_limits_paths.py::test_worker_hands_the_rules_to_the_ranks",
    "tests/code/test_code_worker.py",
    "tests/cli/test_cli.py",
    "tests/cli/test_cli_instance_and_views.py",
    "tests/cluster/",
    "tests/worker/test_supervisor.py",
    "tests/worker/test_drain_flags.py",
    "tests/worker/test_resources.py",
    "tests/worker/test_embedded_poll.py",
    "tests/security/test_sec_files.py",
    "tests/security/test_sec_tokens.py::test_public_bind_",
    "tests/security/test_sec_connections.py",
    "tests/security/test_sec_token_log.py",  # `rankzero api`, to read what it logs
    "tests/api/test_api_sqlite_contention.py",
    "tests/api/test_api_migrations_and_fuzz.py",
    # These start the CLI, uv, bash, docker compose or a sandboxed job in a subprocess (issue 40: the unit
    # tier starts none).
    "tests/perf/test_cli_imports.py",
    "tests/perf/test_supervisor_wakeups.py",
    "tests/perf/test_startup_path.py",
    "tests/environments/test_environment_builds.py",
    "tests/environments/test_environment_clone.py",
    "tests/sdk/test_sdk_project_names.py",
    "tests/security/test_data_prefetch.py",
    "tests/security/test_sandbox_kernel.py",
    "tests/security/test_run_dir_links.py::test_a_resume_checkpoint_swapped_for_a_link_after_the_check_is_not_shown",
    "tests/test_compose.py",
    "tests/slurm/test_slurm_stops.py::test_the_batch_step_records_the_cause_and_requeues_only_what_resumes",
    "tests/slurm/test_slurm_rank_imports.py",
    "tests/reliability/test_rel_minor.py::test_flags_of_workers_never_restarted_are_swept_and_live_ones_kept",
    "tests/knowwhy/test_rank_stacks.py",  # py-spy, a stand-in for it, and a process for it to dump
)


def is_slow(node_id: str, fixture_names: set[str], marker_names: set[str]) -> bool:
    """Whether a test belongs to the slow tier, from its id, the fixtures it uses and the markers it carries."""
    return bool(
        fixture_names & SERVICE_FIXTURES
        or marker_names & (SERVICE_MARKERS | {"slow"})
        or node_id.startswith(LAUNCHES_PROCESSES)
    )


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by mark (`-m "not slow"`)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        markers = {mark.name for mark in item.iter_markers()}
        if "slow" not in markers and is_slow(item.nodeid, fixtures, markers):
            item.add_marker(pytest.mark.slow)
