"""Print the job-spec reference table (Markdown) from the JSON Schema: `python -m trainer.spec_doc`.

docs/trainer.md embeds its output, so the reference cannot drift from the model.
"""

from __future__ import annotations

import json
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


def markdown() -> str:
    schema = json_schema()
    defs = schema.get("$defs", {})
    head = ["| field | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    return "\n".join(head + _rows(schema, defs, ""))


if __name__ == "__main__":
    print(markdown())
