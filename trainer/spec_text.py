"""The one reader of job-spec text (YAML or JSON) for the CLI, the API's raw editor and the trainer.

Torch-free and hardened, because the text may come from anyone who can reach the dashboard:
- no YAML anchors or aliases: a few hundred bytes of aliases expand to gigabytes of JSON;
- at most MAX_SPEC_DEPTH levels of nesting: PyYAML composes nodes recursively, deeper input would
  exhaust the stack (and json.loads raises RecursionError near 1000 levels);
- at most MAX_SPEC_TEXT_BYTES: a spec is a few KB (its args at most 16 KiB); PyYAML takes ~1 s for 64 KB.

The result is plain JSON data (YAML dates and the like become strings; the spec model then says
whether they fit). Validation against the JobSpec model is the caller's job (`trainer/spec_file.py`,
POST /api/jobs).
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

MAX_SPEC_TEXT_BYTES = 64 * 1024
MAX_SPEC_DEPTH = 32


class SpecTextError(ValueError):
    """The text is not one readable spec mapping; the message says what to fix."""


@functools.cache
def _no_alias_loader() -> type[yaml.SafeLoader]:
    """safe_load without anchors/aliases and with at most MAX_SPEC_DEPTH levels of nesting.

    Built on first use: PyYAML is imported only when YAML is read (`rankzero`'s start imports this module,
    and most commands never read a spec; issue 29)."""
    import yaml
    from yaml.composer import ComposerError

    class NoAliasLoader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._depth = 0

        def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise ComposerError(
                    None, None, "aliases (*name) are not supported: write the value out", event.start_mark
                )
            if getattr(self.peek_event(), "anchor", None) is not None:
                event = self.peek_event()
                raise ComposerError(
                    None, None, "anchors (&name) are not supported: write each value out", event.start_mark
                )
            if self._depth >= MAX_SPEC_DEPTH:
                event = self.peek_event()
                raise ComposerError(None, None, f"nested deeper than {MAX_SPEC_DEPTH} levels", event.start_mark)
            self._depth += 1
            try:
                return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
            finally:
                self._depth -= 1

    return NoAliasLoader


def _is_json(filename: str | None) -> bool:
    return filename is not None and filename.lower().endswith(".json")


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of parsed JSON, stopping once past `limit` (iterative: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children)
    return deepest


def _parse_json(text: str) -> Any:
    try:
        value = json.loads(text)
    except RecursionError:
        raise SpecTextError(f"not valid JSON: nested deeper than {MAX_SPEC_DEPTH} levels") from None
    except ValueError as exc:  # json.JSONDecodeError, or an integer past Python's int-from-text limit
        raise SpecTextError(f"not valid JSON: {exc}") from None
    if _depth(value, MAX_SPEC_DEPTH) > MAX_SPEC_DEPTH:
        raise SpecTextError(f"not valid JSON: nested deeper than {MAX_SPEC_DEPTH} levels")
    return value


def _parse_yaml(text: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_no_alias_loader())  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecTextError(f"not valid YAML{where}: {problem}") from None
    except (ValueError, OverflowError) as exc:  # e.g. a date like 2024-13-45, an integer of 10,000 digits
        raise SpecTextError(f"not valid YAML: {exc}") from None


def load_spec_text(
    text: str | bytes, *, filename: str | None = None, max_bytes: int = MAX_SPEC_TEXT_BYTES
) -> dict[str, Any]:
    """The spec mapping in `text`: JSON when `filename` ends in .json, else YAML (which reads JSON too).

    `max_bytes` is for trusted files only (the run's own spec.json, indented, may pass 64 KiB).
    Raises SpecTextError (a ValueError) saying what to fix.
    """
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise SpecTextError(
            f"spec text too large ({size} bytes; at most {max_bytes}): "
            "a spec is a few KB; put data in files the job reads, not in its args"
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            reason = f"{exc.reason} at byte {exc.start}"
            raise SpecTextError(f"spec text is not UTF-8 ({reason}): save it as UTF-8") from None
    value = _parse_json(text) if _is_json(filename) else _parse_yaml(text)
    if not isinstance(value, dict):
        kind = "nothing" if value is None else type(value).__name__
        raise SpecTextError(f"the spec must be one mapping of fields (name: …, model: …), not {kind}")
    try:
        # default=str: YAML dates and the like become strings (the spec model then says whether they fit).
        plain: dict[str, Any] = json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError) as exc:  # e.g. a date used as a mapping key
        raise SpecTextError(f"the spec cannot be expressed as JSON: {exc}") from None
    return plain
