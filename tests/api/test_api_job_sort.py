"""The jobs list sorted by a field, a parameter or a metric, with metric columns (core/job_sort.py, issue 24),
on SQLite and PostgreSQL: the same order on both, missing values last either way, bad keys refused by name."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from core.job_sort import BadSort, JobSort, parse_metric_columns, parse_sort
from core.tables import MetricPoint


@pytest.mark.parametrize(
    "raw, want",
    [
        (None, JobSort("created", descending=True)),
        ("", JobSort("created", descending=True)),
        ("loss", JobSort("loss")),
        ("-step", JobSort("step", descending=True)),
        ("param:lr", JobSort("param", "lr")),
        ("-param:optimizer.lr", JobSort("param", "optimizer.lr", True)),
        ("metric:val/acc", JobSort("metric", "val/acc")),
        ("-metric:train loss", JobSort("metric", "train loss", True)),
    ],
)
def test_sort_keys_parse(raw: str | None, want: JobSort) -> None:
    assert parse_sort(raw) == want


@pytest.mark.parametrize(
    "raw, says",
    [
        ("speed", "cannot sort by 'speed'"),
        ("param:", "is not a parameter name"),
        ("param:1lr", "is not a parameter name"),
        ("param:lr'--", "is not a parameter name"),
        ("metric:", "printable text"),
        ("metric:a\nb", "printable text"),
        ("--loss", "cannot sort by"),
    ],
)
def test_bad_sort_keys_say_what_to_give(raw: str, says: str) -> None:
    with pytest.raises(BadSort, match=says):
        parse_sort(raw)


def test_metric_columns_are_few_and_deduplicated() -> None:
    assert parse_metric_columns(["a", "b", "a"]) == ["a", "b"]
    with pytest.raises(BadSort, match="at most 5"):
        parse_metric_columns([f"m{i}" for i in range(6)])


def _submit(client: TestClient, spec: dict, name: str, params: dict) -> int:
    r = client.post("/api/jobs", json={**spec, "name": name, "params": params})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _points(db: Session, job_id: int, name: str, values: list[float]) -> None:
    for step, value in enumerate(values, start=1):
        db.add(MetricPoint(job_id=job_id, seq=step, step=step, name=name, value=value, time=float(step)))
    db.commit()


def _names(client: TestClient, **query: object) -> list[str]:
    r = client.get("/api/jobs", params=query)
    assert r.status_code == 200, r.text
    return [j["name"] for j in r.json()["items"]]


def test_the_list_sorts_by_parameter_and_metric_with_columns(client: TestClient, spec: dict, db: Session) -> None:
    a = _submit(client, spec, "a", {"lr": 0.1, "opt": "sgd"})
    b = _submit(client, spec, "b", {"lr": 0.001, "opt": "adam"})
    c = _submit(client, spec, "c", {"lr": 0.01})
    _submit(client, spec, "d", {"lr": "warmup"})  # a word where the others have numbers: after them
    _submit(client, spec, "e", {})  # no lr at all: last either way
    _points(db, a, "val/acc", [0.2, 0.9])  # latest 0.9
    _points(db, b, "val/acc", [0.95, 0.5])  # best early, latest 0.5: the column is the latest
    _points(db, c, "val/acc", [0.7])

    assert _names(client) == ["e", "d", "c", "b", "a"]  # newest first, as before
    assert _names(client, sort="created") == ["a", "b", "c", "d", "e"]
    assert _names(client, sort="param:lr") == ["b", "c", "a", "d", "e"]
    assert _names(client, sort="-param:lr") == ["a", "c", "b", "d", "e"]
    assert _names(client, sort="param:opt") == ["b", "a", "e", "d", "c"]  # text; no value: newest first
    assert _names(client, sort="-metric:val/acc") == ["a", "c", "b", "e", "d"]
    assert _names(client, sort="metric:val/acc", limit=2, offset=1) == ["c", "a"]  # pages stay in that order

    page = client.get("/api/jobs", params={"sort": "-metric:val/acc", "metrics": ["val/acc", "nothing"]}).json()
    assert [j["metrics"] for j in page["items"]] == [{"val/acc": 0.9}, {"val/acc": 0.7}, {"val/acc": 0.5}, {}, {}]
    assert all(j["metrics"] is None for j in client.get("/api/jobs").json()["items"])  # only when asked

    r = client.get("/api/jobs", params={"sort": "param:lr'); DROP TABLE jobs; --"})
    assert r.status_code == 422 and "is not a parameter name" in r.json()["detail"]
    r = client.get("/api/jobs", params={"metrics": [f"m{i}" for i in range(6)]})
    assert r.status_code == 422
    assert len(_names(client)) == 5  # nothing was harmed
