"""The console reader against real formats (tests/console/corpus/formats.yaml: each case rendered from its
project's own format string, with the file it came from), one parametrised case each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from core.console_reader.job import ConsoleMetrics

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "corpus" / "formats.yaml").read_text())


def test_the_corpus_is_thirty_formats_or_more() -> None:
    assert len(CASES) >= 30
    assert all({"project", "source", "format", "lines", "series"} <= set(c) for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"{c['project']}:{c['source']}:{i}" for i, c in enumerate(CASES)])
def test_a_real_format_gives_its_step_and_series(case: dict[str, Any]) -> None:
    c = ConsoleMetrics()
    points = c.feed("\n".join(case["lines"]) + "\n")
    series: dict[str, list[list[float]]] = {}
    for p in points:
        series.setdefault(p.name, []).append([p.step, p.value])
    assert sorted(series) == sorted(case["series"]), series
    for name, want in case.get("points", {}).items():
        assert series[name] == [[s, pytest.approx(v)] for s, v in want], (name, series[name])
    if "step" in case:
        assert c.step == case["step"]
    if "total" in case:
        assert c.total == case["total"]
