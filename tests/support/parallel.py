"""How the suite runs on several pytest-xdist workers at once (`make test`: `-n auto --dist loadgroup`).

Most slow tests wait on processes (a worker, torchrun, a browser), not on the CPU, so running them side by
side is what keeps `.ci/run` inside its budget. Three decisions, each a pure function below:

- **What must run together** (`work_group`): a test that shares a fixture wider than itself with its
  neighbours runs on the same worker as they do, or that fixture would be built again on every worker and the
  tests written against its state would see a fresh one. A module- or class-scoped fixture keeps its module
  together; a stateful session fixture that must exist once (`SHARED_SESSION_FIXTURES`: the Slurm cluster)
  keeps every test using it together; a file or folder whose tests share one outside resource (`SHARED_FOLDERS`:
  the Docker stack, the Slurm cluster) is one group. Those two rules come before a test's own `xdist_group`
  mark. Every other test is a unit of its own and goes to whichever worker is free.
- **What starts first** (`order_units`): the longest units first, by the durations measured on an earlier
  run (tests/durations.json, written by `make test-durations`), so the longest group never starts last.
- **What the run took** (`folder_table`): per folder, the seconds its tests spent, printed after the
  slowest tests; with several workers their sum exceeds the wall time.

Otherwise a test's own `@pytest.mark.xdist_group("name")` wins.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pytest

DURATIONS_FILE = Path(__file__).resolve().parent.parent / "durations.json"
WRITE_DURATIONS_ENV = "RANKZERO_WRITE_DURATIONS"
GROUPS_ENV = "RANKZERO_TEST_GROUPS_FILE"  # the workers' decisions, for the controller's scheduler

# Session fixtures that hold state the tests using them were written against, and that cost too much to build
# on every worker: the tests that use them form one group (named after the fixture).
SHARED_SESSION_FIXTURES = {"slurm_cluster": "slurm"}
# Files or folders whose tests share a resource of the machine that exists once (the Docker daemon's compose
# stack; the Slurm cluster). The deploy folder's other modules need no daemon and run anywhere.
SHARED_FOLDERS = {"tests/deploy/test_compose_stack.py": "docker", "tests/slurm/": "slurm"}
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
    # What exists once on the machine comes first: a test that uses it must be where it is, whatever its mark.
    shared = sorted(SHARED_SESSION_FIXTURES[name] for name in set(shared_fixtures) if name in SHARED_SESSION_FIXTURES)
    if shared:
        return shared[0]
    for prefix, group in SHARED_FOLDERS.items():
        if node_id.startswith(prefix):
            return group
    if explicit:
        return explicit
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


def _explicit_groups(item: pytest.Item) -> list[str]:
    marks = item.iter_markers("xdist_group")
    return sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})


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


@pytest.hookimpl(trylast=True)  # after the slow tier is marked and `-m` has deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    arrange(config, items)


def arrange(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On each worker of a `--dist loadgroup` run: decide every test's group, write them where the controller's
    scheduler reads them (`GROUPS_ENV`), and order the tests longest unit first. (pytest 9 derives a test's id
    from its structured id, so xdist 3.8's own `@group` suffix no longer reaches the scheduler; this replaces
    it.) Every worker collects, decides and orders the same way, so their collections stay identical, as xdist
    requires."""
    target = os.environ.get(GROUPS_ENV)
    if not (_is_xdist_worker(config) and target):
        return
    durations = _load_durations()
    units: list[tuple[str, str, bool]] = []
    groups: dict[str, str] = {}
    by_id: dict[str, pytest.Item] = {}
    for item in items:
        explicit = _explicit_groups(item)
        scopes = _fixture_scopes(item)
        group = work_group(item.nodeid, "_".join(explicit) or None, scopes, scopes.keys())
        if group is not None:
            groups[item.nodeid] = group
        units.append((item.nodeid, unit_of(item.nodeid, group), item.get_closest_marker("slow") is not None))
        by_id[item.nodeid] = item
    items[:] = [by_id[node_id] for node_id in order_units(units, durations)]
    mine = f"{target}.{os.getpid()}"
    Path(mine).write_text(json.dumps(groups))
    os.replace(mine, target)  # every worker writes the same map; whole files only


def pytest_configure(config: pytest.Config) -> None:
    # On the controller of a loadgroup run, before its workers start (they inherit the variable).
    distributed = getattr(config.option, "numprocesses", None) and config.getvalue("dist") == "loadgroup"
    if distributed and not _is_xdist_worker(config):
        fd, path = tempfile.mkstemp(prefix="rankzero-test-groups-", suffix=".json")
        os.close(fd)
        os.environ[GROUPS_ENV] = path


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _is_xdist_worker(config) and os.environ.get(GROUPS_ENV):
        with contextlib.suppress(OSError):
            os.unlink(os.environ.pop(GROUPS_ENV))


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """xdist's loadgroup scheduler, with each test's unit read from the map the workers wrote."""
    if config.getvalue("dist") != "loadgroup" or not os.environ.get(GROUPS_ENV):
        return None
    from xdist.scheduler import LoadScopeScheduling

    path = Path(os.environ[GROUPS_ENV])

    class GroupScheduling(LoadScopeScheduling):
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                try:
                    self._groups = json.loads(path.read_text() or "{}")
                except (OSError, ValueError):
                    self._groups = {}
            group = self._groups.get(nodeid)
            return f"group:{group}" if group is not None else nodeid

    return GroupScheduling(config, log)  # pyright: ignore[reportArgumentType]


def pytest_sessionstart(session: pytest.Session) -> None:
    # Once per run (not once per worker): what one run leaves behind for a person to look at starts empty.
    if _is_xdist_worker(session.config):
        return
    from tests.support.browser import SCREENSHOTS

    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)


_SECONDS: dict[str, float] = defaultdict(float)
_BUSY: dict[str, float] = defaultdict(float)  # per xdist worker: the seconds its tests took (balance)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # On the controller (or a run without xdist): every phase of every test, whichever worker ran it.
    _SECONDS[report.nodeid] += float(report.duration)
    node = getattr(report, "node", None)
    _BUSY[str(getattr(getattr(node, "gateway", None), "id", "main"))] += float(report.duration)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if _is_xdist_worker(config) or not _SECONDS:
        return
    rows = folder_table(_SECONDS)
    terminalreporter.write_sep("=", "seconds per folder (summed over tests; workers run side by side)")
    for folder, count, seconds in rows:
        terminalreporter.write_line(f"{folder:<28} {count:>5} tests {seconds:>9.1f} s")
    if len(_BUSY) > 1:  # the run lasts as long as its busiest worker
        busy = ", ".join(f"{worker} {seconds:.0f} s" for worker, seconds in sorted(_BUSY.items()))
        terminalreporter.write_line(f"seconds per worker: {busy}")
    target = os.environ.get(WRITE_DURATIONS_ENV)
    if target:
        Path(target).write_text(json.dumps({k: round(v, 2) for k, v in sorted(_SECONDS.items())}, indent=0) + "\n")
        terminalreporter.write_line(f"durations of {len(_SECONDS)} tests written to {target}")
