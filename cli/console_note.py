"""`rankzero show`'s words for what the console reader made of a script job's output (the metrics response's
`console`: core/console_reader/gate.py), as the job page says it."""

from __future__ import annotations

import json
from typing import Any


def console_words(summary: dict[str, Any] | None) -> list[str]:
    """Lines to print: the series and a line they came from, or none recognised with a suggested pattern; caps."""
    if not summary or not summary.get("lines"):
        return []
    lines = f"{int(summary['lines']):,}"
    series = [str(s) for s in summary.get("series") or []]
    out: list[str] = []
    if series:
        names = ", ".join(series[:6]) + (f" and {len(series) - 6} more" if len(series) > 6 else "")
        out.append(f"console: {names} from lines like `{summary.get('example') or ''}` ({lines} lines read)")
    else:
        out.append(f"console: no metrics recognised in {lines} lines")
        s = summary.get("suggestion")
        if isinstance(s, dict):
            out.append(f"  most frequent numeric line: `{s.get('line')}`")
            body = json.dumps({"regex": s.get("regex"), "name": s.get("name") or "metric"})
            out.append(f"  add it: POST /api/jobs/<id>/console-patterns {body} (the job page has a button)")
    for stream in summary.get("capped_streams") or []:
        mib = int(summary.get("cap_bytes") or 0) >> 20
        out.append(f"console: the reader stopped after the first {mib} MiB of {stream}: later lines were not read")
    return out
