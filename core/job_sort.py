"""The jobs list's order and its extra columns (GET /api/jobs `sort` and `metrics`, issue 24).

A sort key is `FIELD` (ascending) or `-FIELD` (descending): `created`, `name`, `status`, `step`, `loss`,
`param:NAME` (a spec `params` value) or `metric:NAME` (a series' latest value). `parse_sort` is pure and
says what is wrong with a key; `order_by` turns one into SQL for SQLite and PostgreSQL alike: rows without
the value come last whichever the direction, and ties go newest first, so paging is stable.

A parameter may be a number on one job and a word on another: numbers sort as numbers, before words (which
sort as text). A metric sorts by its latest step's value: one index seek per job (metric_points'
(job_id, name, step) index), so the cost grows with the filtered jobs, never with their points.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, and_, case, cast, func, literal_column, select
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import Session, col

from core.tables import Job, MetricPoint

# The spec's own rule for parameter names (trainer/spec.py PARAM_NAME) and the metrics route's for series.
PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")
MAX_METRIC_CHARS = 200
MAX_METRIC_COLUMNS = 5
PLAIN_FIELDS = ("created", "name", "status", "step", "loss")


class BadSort(ValueError):
    """The sort key or a column cannot be used; the message says what to give instead."""


@dataclass(frozen=True)
class JobSort:
    field: str  # one of PLAIN_FIELDS, "param" or "metric"
    name: str | None = None  # the parameter's or series' name
    descending: bool = False


NEWEST_FIRST = JobSort("created", descending=True)


def metric_name(raw: str) -> str:
    """A series name as the metrics route takes one: printable, at most MAX_METRIC_CHARS characters."""
    if not raw or len(raw) > MAX_METRIC_CHARS or not raw.isprintable():
        raise BadSort(f"a metric name is printable text of 1 to {MAX_METRIC_CHARS} characters")
    return raw


def parse_sort(raw: str | None) -> JobSort:
    """`-loss` → JobSort("loss", descending=True); `param:lr` → JobSort("param", "lr"); None → newest first."""
    if not raw:
        return NEWEST_FIRST
    descending = raw.startswith("-")
    key = raw[1:] if descending else raw
    if key in PLAIN_FIELDS:
        return JobSort(key, descending=descending)
    kind, _, name = key.partition(":")
    if kind == "param":
        if not PARAM_NAME.match(name):
            raise BadSort(f"param:{name[:70]!r} is not a parameter name (a letter or _, then letters, digits, _ or .)")
        return JobSort("param", name, descending)
    if kind == "metric":
        return JobSort("metric", metric_name(name), descending)
    raise BadSort(
        f"cannot sort by {raw[:80]!r}: give one of {', '.join(PLAIN_FIELDS)}, param:NAME or metric:NAME, "
        "with a leading - for descending"
    )


def parse_metric_columns(raw: Iterable[str]) -> list[str]:
    """The series whose latest value each listed job carries (`metrics`), at most MAX_METRIC_COLUMNS, in order."""
    names = list(dict.fromkeys(metric_name(n) for n in raw))
    if len(names) > MAX_METRIC_COLUMNS:
        raise BadSort(f"at most {MAX_METRIC_COLUMNS} metric columns at once")
    return names


def _param_values(name: str, dialect: str) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """(the value as a number, or NULL; the value as text) of `spec.params.NAME`. NAME passed PARAM_NAME: no quote
    or backslash can reach the SQL text."""
    if dialect == "postgresql":
        path = f"(jobs.spec -> 'params' -> '{name}')"
        number = case(
            (
                literal_column(f"json_typeof{path}") == "number",
                cast(literal_column(f"(jobs.spec -> 'params' ->> '{name}')"), Float),
            ),
            else_=None,
        )
        return number, literal_column(f"(jobs.spec -> 'params' ->> '{name}')")
    path = f'$.params."{name}"'
    number = case(
        (func.json_type(col(Job.spec), path).in_(("integer", "real")), func.json_extract(col(Job.spec), path)),
        else_=None,
    )
    text = case((func.json_type(col(Job.spec), path) == "text", func.json_extract(col(Job.spec), path)), else_=None)
    return number, text


def _latest_value(name: str) -> ColumnElement[Any]:
    """The value at the newest step of series `name` of the row's job (NULL when it has none)."""
    return (
        select(col(MetricPoint.value))
        .where(col(MetricPoint.job_id) == col(Job.id), col(MetricPoint.name) == name)
        .order_by(col(MetricPoint.step).desc())
        .limit(1)
        .correlate(Job)
        .scalar_subquery()
    )


def order_by(sort: JobSort, dialect: str) -> list[ColumnElement[Any]]:
    """ORDER BY terms for `sort`: the value (missing ones last), then the newest job first."""
    plain: dict[str, Any] = {
        "name": col(Job.name),
        "status": col(Job.status),
        "step": col(Job.step),
        "loss": col(Job.latest_loss),
    }
    if sort.field == "created":
        return [col(Job.id).desc() if sort.descending else col(Job.id).asc()]
    if sort.field == "param":
        values = list(_param_values(sort.name or "", dialect))
    elif sort.field == "metric":
        values = [_latest_value(sort.name or "")]
    else:
        values = [plain[sort.field]]
    terms = [(v.desc() if sort.descending else v.asc()).nulls_last() for v in values]
    return [*terms, col(Job.id).desc()]


def latest_metrics(session: Session, job_ids: Sequence[int], names: Sequence[str]) -> dict[int, dict[str, float]]:
    """job id → {series: value at its newest step} for the listed jobs and series (one statement)."""
    if not job_ids or not names:
        return {}
    newest = (
        select(col(MetricPoint.job_id), col(MetricPoint.name), func.max(col(MetricPoint.step)).label("step"))
        .where(col(MetricPoint.job_id).in_(job_ids), col(MetricPoint.name).in_(names))
        .group_by(col(MetricPoint.job_id), col(MetricPoint.name))
        .subquery()
    )
    rows = session.execute(
        select(col(MetricPoint.job_id), col(MetricPoint.name), col(MetricPoint.value), col(MetricPoint.seq))
        .join(
            newest,
            and_(
                col(MetricPoint.job_id) == newest.c.job_id,
                col(MetricPoint.name) == newest.c.name,
                col(MetricPoint.step) == newest.c.step,
            ),
        )
        .order_by(col(MetricPoint.seq))
    ).all()
    out: dict[int, dict[str, float]] = {}
    for job_id, name, value, _seq in rows:  # a replayed step: the newest seq's value wins
        out.setdefault(job_id, {})[name] = value
    return out
