"""Which user code a job may name (`model`/`data`/`loss` as "module:function"): a module under one of
the server's RANKZERO_ALLOWED_CODE prefixes, or inside the job's own code bundle.

Checked at submit (api/submit_policy.py) and again by the worker before it runs the job
(worker/supervise.py): the allow-list may have changed since, and a row may not have come through
the API at all.
"""

from __future__ import annotations

from core import bundles
from core.settings import Settings
from trainer.spec import JobSpec


def module_allowed(module: str, prefixes: list[str]) -> bool:
    # A prefix names a package: "myorg" allows "myorg" and "myorg.models", not "myorgevil".
    return any(module == p or module.startswith(p.rstrip(".") + ".") for p in prefixes)


def bundle_modules(spec: JobSpec, settings: Settings) -> list[str]:
    """Top-level modules of the job's own bundle: user code from them needs no RANKZERO_ALLOWED_CODE entry."""
    found = bundles.manifest(settings, spec.code) if spec.code else None
    return sorted(found.top_level_modules()) if found else []


def user_code_refusal(spec: JobSpec, settings: Settings) -> tuple[str, str] | None:
    """(field, message) for the first user-code name the server does not allow; None when all are allowed."""
    prefixes = settings.allowed_code_prefixes + bundle_modules(spec, settings)
    for field, name in (
        ("model", spec.model.name),
        ("data", spec.data.name),
        ("loss", spec.loss.name if spec.loss else ""),
    ):
        if name and name in spec.user_code_names() and not module_allowed(name.split(":", 1)[0], prefixes):
            allowed = ", ".join(prefixes) if prefixes else "none are allowed"
            return field, (
                f"user code {name!r} is outside the allowed module prefixes ({allowed}); "
                "the server's RANKZERO_ALLOWED_CODE lists them"
            )
    return None
