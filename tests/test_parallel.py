"""How the suite is spread over xdist workers (tests/support/parallel.py): who runs together, what starts first."""

from __future__ import annotations

import pytest

from tests.support.parallel import folder_table, order_units, work_group


@pytest.mark.parametrize(
    ("node_id", "explicit", "scopes", "group"),
    [
        # A test with only function and session fixtures may run anywhere, alone.
        ("tests/api/test_a.py::test_x", None, {"tmp_path": "function", "browser": "session"}, None),
        # A module fixture keeps its module on one worker.
        ("tests/web/test_b.py::test_x", None, {"svc": "module", "tmp_path": "function"}, "tests/web/test_b.py"),
        ("tests/web/test_b.py::C::test_x", None, {"c": "class"}, "tests/web/test_b.py"),
        # A shared stateful session fixture keeps every test using it together, whatever its folder.
        ("tests/slurm/test_c.py::test_x", None, {"slurm_cluster": "session"}, "slurm"),
        ("tests/web/test_slurm.py::test_x", None, {"slurm_cluster": "session", "m": "module"}, "slurm"),
        ("tests/web/test_slurm.py::test_x", "mine", {"slurm_cluster": "session"}, "slurm"),
        ("tests/slurm/test_states.py::test_x", None, {}, "slurm"),
        # One compose stack on one Docker daemon: its file is one group; the folder's other files are not.
        ("tests/deploy/test_compose_stack.py::test_x", None, {}, "docker"),
        ("tests/deploy/test_compose_stack.py::test_x", "mine", {"m": "module"}, "docker"),
        ("tests/deploy/test_deploy_parts.py::test_x", None, {}, None),
        ("tests/test_compose.py::test_x", None, {}, None),
        # Otherwise a test's own mark wins.
        ("tests/api/test_a.py::test_x", "mine", {"m": "module"}, "mine"),
    ],
)
def test_work_group(node_id: str, explicit: str | None, scopes: dict[str, str], group: str | None) -> None:
    assert work_group(node_id, explicit, scopes, scopes.keys()) == group


def test_longest_units_start_first_and_stay_together() -> None:
    units = [
        ("a.py::t1", "a.py::t1", False),
        ("b.py::t1", "b.py", True),
        ("c.py::t1", "c.py::t1", True),  # never timed: counts as a slow test's default
        ("b.py::t2", "b.py", True),
        ("d.py::t1", "d.py::t1", False),
    ]
    durations = {"a.py::t1": 50.0, "b.py::t1": 30.0, "b.py::t2": 30.0, "d.py::t1": 0.1}
    assert order_units(units, durations) == ["b.py::t1", "b.py::t2", "a.py::t1", "c.py::t1", "d.py::t1"]


def test_ties_keep_collection_order() -> None:
    units = [("x::1", "x::1", False), ("y::1", "y::1", False)]
    assert order_units(units, {}) == ["x::1", "y::1"]


def test_folder_table_sums_per_folder() -> None:
    rows = folder_table({"tests/a/x.py::t": 2.0, "tests/a/y.py::t": 3.0, "tests/b/z.py::t": 1.0, "tests/t.py::u": 4})
    assert rows == [("tests/a", 2, 5.0), ("tests/t.py", 1, 4.0), ("tests/b", 1, 1.0)]
