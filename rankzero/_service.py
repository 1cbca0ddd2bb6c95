"""The service's `trainer` package for the SDK, whatever the user's project calls its own modules.

A project often has a `trainer.py` or a `trainer/` package of its own, first on its path (its script's
folder): `import rankzero` would then find it where the SDK needs the service's (the event contract, the run
directory, checkpoint files) and fail ("'trainer' is not a package"). So the SDK's modules are imported
inside `service_names()`: while they load, the name `trainer` means the service's package; afterwards the
project's modules have the name back and the SDK keeps its references. Where the name is already the
service's (the built-in trainer, tests, no such module in the project) nothing is swapped, so no module is
ever loaded twice.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = str(Path(__file__).resolve().parent.parent)
_OURS = str(Path(ROOT) / "trainer" / "__init__.py")
_NAME = "trainer"
_lock = threading.RLock()
_kept: dict[str, ModuleType] = {}  # the service's trainer modules loaded under a swap: given back at the next


def _named(modules: dict[str, ModuleType]) -> list[str]:
    return [k for k in modules if k == _NAME or k.startswith(_NAME + ".")]


def _is_ours(module: ModuleType | None) -> bool:
    return module is not None and getattr(module, "__file__", None) == _OURS


def _name_is_ours() -> bool:
    loaded = sys.modules.get(_NAME)
    if loaded is not None:
        return _is_ours(loaded)
    try:
        spec = importlib.util.find_spec(_NAME)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin == _OURS


@contextlib.contextmanager
def service_names() -> Iterator[None]:
    """While inside, `import trainer…` imports the service's package (re-entrant, thread-safe)."""
    with _lock:
        if _name_is_ours():
            yield
            return
        theirs = {k: sys.modules.pop(k) for k in _named(dict(sys.modules))}
        sys.modules.update(_kept)
        sys.path.insert(0, ROOT)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(ROOT)
            _kept.update({k: sys.modules.pop(k) for k in _named(dict(sys.modules))})  # all loaded as ours
            sys.modules.update(theirs)
