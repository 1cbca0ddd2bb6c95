"""How the suite runs on several pytest-xdist workers at once (`make test`: `-n auto --dist loadgroup`).

Most slow tests wait on processes (a worker, torchrun, a browser), not on the CPU, so running them side by
side is what keeps `.ci/run` inside its budget. Three decisions, each a pure function below:

- **What must run together** (`work_group`): a test that shares a fixture wider than itself with its
  neighbours runs on the same worker as they do, or that fixture would be built again on every worker and the
  tests written against its state would see a fresh one. A module- or class-scoped fixture keeps its module
  together; a stateful session fixture that must exist once (`SHARED_SESSION_FIXTURES`: the Slurm cluster)
  keeps every test using it together; a folder whose tests share one outside resource (`SHARED_FOLDERS`: the
  Docker daemon) is one group. Every other test is a unit of its own and goes to whichever worker is free.
- **What starts first** (`order_units`): the longest units first, by the durations measured on an earlier
  run (tests/durations.json, written by `make test-durations`), so the longest group never starts last.
- **What the run took** (`folder_table`): per folder, the seconds its tests spent, printed after the
  slowest tests; with several workers their sum exceeds the wall time.

An explicit `@pytest.mark.xdist_group("name")` always wins.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pytest

DURATIONS_FILE = Path(__file__).resolve().parent.parent / "durations.json"
WRITE_DURATIONS_ENV = "RANKZERO_WRITE_DURATIONS"

# Session fixtures that hold state the tests using them were written against, and that cost too much to build
# on every worker: the tests that use them form one group (named after the fixture).
SHARED_SESSION_FIXTURES = frozenset({"slurm_cluster"})
# Folders whose tests share a resource of the machine that exists once (a Docker daemon and its images).
SHARED_FOLDERS = {"tests/deploy/": "docker", "tests/test_compose.py": "docker"}
WIDE_SCOPES = frozenset({"module", "class", "package"})
# A test never timed before counts as this many seconds (slow tier) or this many (unit tier).
UNKNOWN_SLOW_S = 20.0
UNKNOWN_FAST_S = 0.2


def work_group(
    node_id: str, explicit: str | None, fixture_scopes: Mapping[str, str], shared_fixtures: Iterable[str] = ()
) -> str | None:
    """The xdist group a test joins, or None when it may run on any worker on its own.

    `fixture_scopes`: the fixtures the test uses (directly or not) → their scope; `shared_fixtures`: the names
    among them that are in `SHARED_SESSION_FIXTURES` (passed in so the table can be tested without pytest).
    """
    if explicit:
        return explicit
    for prefix, group in SHARED_FOLDERS.items():
        if node_id.startswith(prefix):
            return group
    shared = sorted(set(shared_fixtures) & SHARED_SESSION_FIXTURES)
    if shared:
        return shared[0]
    if any(scope in WIDE_SCOPES for scope in fixture_scopes.values()):
        return node_id.split("::", 1)[0]
    return None


def unit_of(node_id: str, group: str | None) -> str:
    return group if group is not None else node_id


def order_units(units: Sequence[tuple[str, str, bool]], durations: Mapping[str, float]) -> list[str]:
    """Test ids in the order to hand them out: units (`(node_id, unit, slow)` in collection order) longest
    first, each unit's tests kept together and in their own order. Ties keep collection order."""
    cost: dict[str, float] = defaultdict(float)
    members: dict[str, list[str]] = defaultdict(list)
    first_seen: dict[str, int] = {}
    for index, (node_id, unit, slow) in enumerate(units):
        cost[unit] += durations.get(node_id, UNKNOWN_SLOW_S if slow else UNKNOWN_FAST_S)
        members[unit].append(node_id)
        first_seen.setdefault(unit, index)
    ordered = sorted(members, key=lambda u: (-cost[u], first_seen[u]))
    return [node_id for unit in ordered for node_id in members[unit]]


def folder_of(node_id: str) -> str:
    parts = node_id.split("::", 1)[0].split("/")
    return "/".join(parts[:2])


def folder_table(seconds_by_test: Mapping[str, float]) -> list[tuple[str, int, float]]:
    """(folder, tests, seconds) per folder, most seconds first."""
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for node_id, seconds in seconds_by_test.items():
        folder = folder_of(node_id)
        total[folder] += seconds
        count[folder] += 1
    return sorted(((f, count[f], total[f]) for f in total), key=lambda row: -row[2])


def _load_durations() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _explicit_group(item: pytest.Item) -> str | None:
    for mark in item.iter_markers("xdist_group"):
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    return None


def _fixture_scopes(item: pytest.Item) -> dict[str, str]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return {}
    scopes = {}
    for name, defs in info.name2fixturedefs.items():
        if defs:
            scopes[name] = str(defs[-1].scope)
    return scopes


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _runs_distributed(config: pytest.Config) -> bool:
    return _is_xdist_worker(config) or bool(getattr(config.option, "numprocesses", None))


def arrange(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group and order the tests for the workers; tests/conftest.py calls it after marking the slow tier,
    before xdist reads the groups. Every worker collects and orders the same way, so their collections stay
    identical, as xdist requires."""
    if not _runs_distributed(config):
        return
    durations = _load_durations()
    units = []
    for item in items:
        scopes = _fixture_scopes(item)
        group = work_group(item.nodeid, _explicit_group(item), scopes, scopes.keys())
        if group is not None and _explicit_group(item) is None:
            item.add_marker(pytest.mark.xdist_group(group))
        slow = item.get_closest_marker("slow") is not None
        units.append((item.nodeid, unit_of(item.nodeid, group), slow))
    order = {node_id: i for i, node_id in enumerate(order_units(units, durations))}
    items.sort(key=lambda item: order[item.nodeid])


def pytest_sessionstart(session: pytest.Session) -> None:
    # Once per run (not once per worker): what one run leaves behind for a person to look at starts empty.
    if _is_xdist_worker(session.config):
        return
    from tests.support.browser import SCREENSHOTS

    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)


_SECONDS: dict[str, float] = defaultdict(float)


def report_test_id(node_id: str) -> str:
    """A report's test id without the `@group` suffix xdist adds to grouped tests."""
    head, at, group = node_id.rpartition("@")
    return head if at and "]" not in group and "::" not in group else node_id


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # On the controller (or a run without xdist): every phase of every test, whichever worker ran it.
    _SECONDS[report_test_id(report.nodeid)] += float(report.duration)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if _is_xdist_worker(config) or not _SECONDS:
        return
    rows = folder_table(_SECONDS)
    terminalreporter.write_sep("=", "seconds per folder (summed over tests; workers run side by side)")
    for folder, count, seconds in rows:
        terminalreporter.write_line(f"{folder:<28} {count:>5} tests {seconds:>9.1f} s")
    target = os.environ.get(WRITE_DURATIONS_ENV)
    if target:
        Path(target).write_text(json.dumps({k: round(v, 2) for k, v in sorted(_SECONDS.items())}, indent=0) + "\n")
        terminalreporter.write_line(f"durations of {len(_SECONDS)} tests written to {target}")
