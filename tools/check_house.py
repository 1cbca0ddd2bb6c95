"""The house rules that `make lint` keeps true (issue 40): no import cycle among the service's modules, and no
module in worker/ or core/ past its folder's line limit.

    python -m tools.check_house        # exit 1, saying which file or cycle and what to do

Cycles: grimp's graph (the library import-linter stands on; it finds the chains) of every module of core,
api, worker, trainer, cli and rankzero, imports inside functions and under TYPE_CHECKING included: a module
imported lazily to dodge a cycle is still a cycle of the design. import-linter's `acyclic_siblings` contract
(pyproject.toml) also refuses cycles between the sub-packages of one package; this check sees module cycles
that cross the top-level packages too, which no contract does.

Line limits (every .py file below the folder, recursively): worker/ 450, the house issue's; core/ 700, which
its largest module, core/settings.py, meets (core/placement.py was split to meet it).

The decisions (`cycles`, `oversized`, `problems`) are pure; `main` reads the tree."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grimp  # the import graph import-linter stands on (pinned in pyproject.toml's test extras)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "api", "worker", "trainer", "cli", "rankzero")


@dataclass(frozen=True)
class Limit:
    folder: str  # relative to the repository root, e.g. "worker"
    max_lines: int


LIMITS = (
    Limit("worker", 450),
    Limit("core", 700),
)


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every import cycle in `graph`, each once, as a path that ends where it starts (its smallest module first),
    sorted: for each import a -> b, grimp's shortest chain back from b to a, if there is one."""
    found: dict[frozenset[str], list[str]] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported == importer:
                loop = [importer, importer]
            else:
                back = graph.find_shortest_chain(importer=imported, imported=importer)
                if back is None:
                    continue
                loop = [importer, *back]  # the chain runs from `imported` back to `importer`
            found.setdefault(frozenset(loop), _from_smallest(loop))
    return sorted(found.values())


def _from_smallest(loop: list[str]) -> list[str]:
    """The same cycle (first == last) started at its smallest module, so each reads one way however found."""
    ring = loop[:-1]
    at = ring.index(min(ring))
    return [*ring[at:], *ring[:at], ring[at]]


def oversized(line_counts: Mapping[str, int], limits: Sequence[Limit]) -> list[tuple[str, int, Limit]]:
    """Each file (a path relative to the root, with /) past the limit of the folder it is in, by path."""
    found = []
    for path, lines in sorted(line_counts.items()):
        for limit in limits:
            if path.startswith(limit.folder + "/") and lines > limit.max_lines:
                found.append((path, lines, limit))
    return found


def problems(graph: grimp.ImportGraph, line_counts: Mapping[str, int], limits: Sequence[Limit]) -> list[str]:
    """What breaks the house rules, each said with what to do about it; [] when nothing does."""
    said = []
    for loop in cycles(graph):
        said.append(
            f"import cycle: {' -> '.join(loop)}. Break it: move what both sides need into a module of its own "
            "that imports neither (as cli/spec_input.py serves cli/job_commands.py and cli/sweep_commands.py), "
            "or pass it in; a lazy import inside a function is still a cycle."
        )
    for path, lines, limit in oversized(line_counts, limits):
        said.append(
            f"{path} has {lines} lines; {limit.folder}/ allows {limit.max_lines} (tools/check_house.py LIMITS). "
            "Split it along its seams into modules with one job each (as worker/ingest_*.py, worker/launch_command.py "
            "and core/placement_*.py were) and add them to docs/ARCHITECTURE.md."
        )
    return said


def import_graph(packages: Sequence[str] = PACKAGES) -> grimp.ImportGraph:
    """The modules of `packages` and their imports among them (every import statement, lazy ones included)."""
    return grimp.build_graph(*packages, cache_dir=None)


def line_counts(root: Path, limits: Sequence[Limit]) -> dict[str, int]:
    """Lines of every Python file below each limit's folder, by path relative to `root`."""
    counts = {}
    for limit in limits:
        for path in sorted((root / limit.folder).rglob("*.py")):
            with path.open("rb") as fh:
                counts[path.relative_to(root).as_posix()] = sum(1 for _ in fh)
    return counts


def main() -> int:
    sys.path.insert(0, str(ROOT))  # grimp finds the packages as Python would from the repository root
    said = problems(import_graph(), line_counts(ROOT, LIMITS), LIMITS)
    for line in said:
        print(f"check_house: {line}", file=sys.stderr)
    if not said:
        print("check_house: no import cycle; worker/ and core/ within their line limits")
    return 1 if said else 0


if __name__ == "__main__":
    sys.exit(main())
