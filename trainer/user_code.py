"""Import user code named `package.module:function` from the Python path."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def import_user_function(name: str, what: str) -> Callable[..., Any]:
    """Return the callable that `name` ('package.module:function') names; `what` words the errors."""
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"cannot import {what} module {module_name!r} ({exc}); put it on PYTHONPATH or install its package"
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise AttributeError(f"{what} {name!r}: module {module_name!r} has no callable {attr!r}")
    return fn
