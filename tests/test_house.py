"""tools/check_house.py, the house rules `make lint` keeps (issue 40): import cycles and line limits, one case
per row (fake import graphs built with grimp, the library the checker reads the real one with)."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

from tools.check_house import LIMITS, Limit, cycles, import_graph, line_counts, oversized, problems


def graph(*imports: str) -> grimp.ImportGraph:
    """A graph of "a -> b" imports (modules without imports: a bare "a")."""
    built = grimp.ImportGraph()
    for edge in imports:
        importer, _, imported = (part.strip() for part in edge.partition("->"))
        built.add_module(importer)
        if imported:
            built.add_module(imported)
            built.add_import(importer=importer, imported=imported)
    return built


CYCLES = [
    ("no imports", graph("a", "b"), []),
    ("a chain is no cycle", graph("a -> b", "b -> c", "a -> c"), []),
    ("two modules importing each other", graph("a -> b", "b -> a"), [["a", "b", "a"]]),
    ("three, said once from the smallest", graph("b -> c", "c -> a", "a -> b"), [["a", "b", "c", "a"]]),
    ("a module importing itself", graph("a -> a", "a -> b"), [["a", "a"]]),
    ("a cycle beside a chain into it", graph("x -> a", "a -> b", "b -> a"), [["a", "b", "a"]]),
    (
        "two cycles, each named",
        graph("cli.jobs -> cli.sweeps", "cli.sweeps -> cli.jobs", "core.p -> core.q", "core.q -> core.p"),
        [["cli.jobs", "cli.sweeps", "cli.jobs"], ["core.p", "core.q", "core.p"]],
    ),
    (
        "a cycle across packages",
        graph("worker.x -> cli.y", "cli.y -> core.z", "core.z -> worker.x"),
        [["cli.y", "core.z", "worker.x", "cli.y"]],
    ),
]


@pytest.mark.parametrize(("case", "imports", "expected"), CYCLES, ids=[c[0] for c in CYCLES])
def test_cycles(case: str, imports: grimp.ImportGraph, expected: list[list[str]]) -> None:
    assert cycles(imports) == expected, case


WORKER, CORE = LIMITS
OVERSIZED = [
    ("worker at its limit", {"worker/a.py": 450}, []),
    ("worker one past", {"worker/a.py": 451}, [("worker/a.py", 451, WORKER)]),
    ("worker's sub-folders count", {"worker/slurm/agent.py": 500}, [("worker/slurm/agent.py", 500, WORKER)]),
    ("core at its limit", {"core/settings.py": 700}, []),
    ("core one past", {"core/placement.py": 701}, [("core/placement.py", 701, CORE)]),
    ("core's 450 is no limit", {"core/jobs.py": 600}, []),
    ("other folders have none", {"api/app.py": 5000, "tests/test_x.py": 3000}, []),
    ("a name that only begins like the folder", {"workers/a.py": 900, "core_extra/b.py": 900}, []),
    (
        "several, by path",
        {"worker/z.py": 460, "worker/b.py": 470},
        [("worker/b.py", 470, WORKER), ("worker/z.py", 460, WORKER)],
    ),
]


@pytest.mark.parametrize(("case", "counts", "expected"), OVERSIZED, ids=[c[0] for c in OVERSIZED])
def test_oversized(case: str, counts: dict[str, int], expected: list[tuple[str, int, Limit]]) -> None:
    assert oversized(counts, LIMITS) == expected, case


def test_limits_are_the_house_rules() -> None:
    assert [(limit.folder, limit.max_lines) for limit in LIMITS] == [("worker", 450), ("core", 700)]


def test_problems_say_which_file_or_cycle_and_what_to_do() -> None:
    said = problems(graph("cli.a -> cli.b", "cli.b -> cli.a"), {"worker/ingest.py": 731, "worker/ok.py": 10}, LIMITS)
    assert len(said) == 2
    cycle, size = said
    assert "import cycle: cli.a -> cli.b -> cli.a" in cycle and "module of its own" in cycle
    assert "worker/ingest.py has 731 lines; worker/ allows 450" in size and "Split it" in size
    assert problems(graph("a -> b"), {"worker/ok.py": 10}, LIMITS) == []


def test_line_counts_read_every_python_file_below_each_folder(tmp_path: Path) -> None:
    (tmp_path / "worker" / "slurm").mkdir(parents=True)
    (tmp_path / "core").mkdir()
    (tmp_path / "worker" / "a.py").write_text("x = 1\n" * 3)
    (tmp_path / "worker" / "slurm" / "b.py").write_text("y = 2\nz = 3")  # no newline at the end: still 2 lines
    (tmp_path / "worker" / "notes.txt").write_text("not python\n" * 1000)
    (tmp_path / "core" / "c.py").write_text("")
    assert line_counts(tmp_path, LIMITS) == {"worker/a.py": 3, "worker/slurm/b.py": 2, "core/c.py": 0}


def test_a_lazy_import_inside_a_function_is_still_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real graph (grimp reading files): a cycle hidden behind an import inside a function is found."""
    package = tmp_path / "house_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text("from house_probe import sweeps\n")
    (package / "sweeps.py").write_text("def run():\n    from house_probe.jobs import x  # lazy\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles(import_graph(("house_probe",))) == [["house_probe.jobs", "house_probe.sweeps", "house_probe.jobs"]]
