"""The job-spec reference table (Markdown) from the JSON Schema: `python -m trainer.spec_doc` prints it,
`python -m trainer.spec_doc --write docs/trainer.md` replaces the table embedded there.

docs/trainer.md embeds its output; tests/scripts/test_spec_reference.py fails when the two differ, so
the reference cannot drift from the model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from trainer.spec import json_schema

BOUNDS = (
    ("minimum", "≥"),
    ("exclusiveMinimum", ">"),
    ("maximum", "≤"),
    ("exclusiveMaximum", "<"),
    ("minLength", "length ≥"),
    ("maxLength", "length ≤"),
)


def _type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "enum" in prop:
        return " \\| ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    if "anyOf" in prop:
        return " \\| ".join(_type(p, defs) for p in prop["anyOf"])
    if prop.get("type") == "array" and "prefixItems" in prop:
        return "[" + ", ".join(_type(p, defs) for p in prop["prefixItems"]) + "]"
    return prop.get("type", "any")


def _bounds(prop: dict[str, Any]) -> str:
    found = []
    for p in [prop, *prop.get("anyOf", []), *prop.get("prefixItems", [])]:
        found += [f"{sym} {p[key]}" for key, sym in BOUNDS if key in p]
    return ", ".join(dict.fromkeys(found))


def _rows(model: dict[str, Any], defs: dict[str, Any], prefix: str) -> list[str]:
    rows = []
    for name, prop in model.get("properties", {}).items():
        default = json.dumps(prop["default"]) if "default" in prop else ("(see section)" if "$ref" in prop else "")
        desc = prop.get("description", "").replace("|", "\\|")
        rows.append(f"| `{prefix}{name}` | {_type(prop, defs)} | {default} | {_bounds(prop)} | {desc} |")
        ref = prop.get("$ref") or next((p["$ref"] for p in prop.get("anyOf", []) if "$ref" in p), None)
        if ref:
            rows += _rows(defs[ref.rsplit("/", 1)[-1]], defs, f"{prefix}{name}.")
    return rows


HEAD = "| field | type | default | bounds | meaning |"


def markdown() -> str:
    schema = json_schema()
    defs = schema.get("$defs", {})
    head = [HEAD, "|---|---|---|---|---|"]
    return "\n".join(head + _rows(schema, defs, ""))


def embedded_table(doc: str) -> tuple[int, int]:
    """The line range [start, end) of the reference table in `doc`: from its header row to the first line
    that is not a table row. ValueError when the doc has no such table."""
    lines = doc.splitlines()
    try:
        start = lines.index(HEAD)
    except ValueError:
        raise ValueError(f"no spec reference table (a line {HEAD!r}) in the document") from None
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def with_table(doc: str, table: str) -> str:
    """`doc` with its embedded reference table replaced by `table`."""
    start, end = embedded_table(doc)
    lines = doc.splitlines()
    return "\n".join([*lines[:start], *table.splitlines(), *lines[end:]]) + ("\n" if doc.endswith("\n") else "")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--write":
        path = Path(argv[1])
        path.write_text(with_table(path.read_text(encoding="utf-8"), markdown()), encoding="utf-8")
        return 0
    if argv:
        print("usage: python -m trainer.spec_doc [--write docs/trainer.md]", file=sys.stderr)
        return 2
    print(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
