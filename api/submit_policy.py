"""What the service refuses at submit time, beyond what the JobSpec model itself checks.

Each check raises `SpecRefused` naming the field (as a FastAPI `loc`) and what to do instead; a
limit's message names the limit and the setting that raises it. The queue quota raises
`QuotaExceeded` (a SpecRefused, so a route that knows only SpecRefused still refuses it).
"""

from __future__ import annotations

import json
import logging

from core import capacity
from core.paths import UnsafePath, inside_dataset_roots, inside_runs_dir
from core.settings import Settings
from trainer.data import confine
from trainer.spec import JobSpec

log = logging.getLogger(__name__)


class SpecRefused(ValueError):
    def __init__(self, loc: tuple[str, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


def _module_allowed(module: str, prefixes: list[str]) -> bool:
    # A prefix names a package: "myorg" allows "myorg" and "myorg.models", not "myorgevil".
    return any(module == p or module.startswith(p.rstrip(".") + ".") for p in prefixes)


def check_user_code(spec: JobSpec, settings: Settings) -> None:
    prefixes = settings.allowed_code_prefixes
    for field, name in (
        ("model", spec.model.name),
        ("data", spec.data.name),
        ("loss", spec.loss.name if spec.loss else ""),
    ):
        if name and name in spec.user_code_names() and not _module_allowed(name.split(":", 1)[0], prefixes):
            allowed = ", ".join(prefixes) if prefixes else "none are allowed"
            raise SpecRefused(
                ("body", field, "name"),
                f"user code {name!r} is outside the allowed module prefixes ({allowed}); "
                "the server's RANKZERO_ALLOWED_CODE lists them",
            )


def check_resume_from(spec: JobSpec, settings: Settings) -> JobSpec:
    """Return the spec with resume_from replaced by its resolved path inside the runs dir."""
    if spec.resume_from is None:
        return spec
    try:
        path = inside_runs_dir(spec.resume_from, settings.resolved_runs_dir)
    except UnsafePath as exc:
        raise SpecRefused(("body", "resume_from"), f"resume_from refused: {exc}") from None
    if not path.is_file():
        raise SpecRefused(("body", "resume_from"), "resume_from: no such checkpoint file inside the runs dir")
    return spec.model_copy(update={"resume_from": str(path)})


def check_plain_text(spec: JobSpec) -> None:
    """Every string must be storable and printable: no lone surrogates (not UTF-8), no NUL."""
    encoded = json.dumps(spec.model_dump(mode="json"), ensure_ascii=False)
    try:
        encoded.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecRefused(
            ("body",), "the spec contains text that is not valid Unicode (a lone surrogate); send UTF-8 text"
        ) from None
    if "\x00" in encoded or "\\u0000" in encoded:
        raise SpecRefused(("body",), "the spec contains a NUL character; remove it")


def check_single_node(spec: JobSpec) -> None:
    if spec.nnodes != 1:
        raise SpecRefused(
            ("body", "nnodes"), "this service runs single-node jobs for now: set nnodes 1 (use nproc for more ranks)"
        )


def check_data_paths(spec: JobSpec, settings: Settings) -> JobSpec:
    """Return the spec with its data folder (root / path) resolved inside the allowed data set folders."""
    arg = confine.path_arg(spec.data.name)
    if arg is None:
        return spec
    field = f"data.args.{arg}"
    if arg not in spec.data.args and arg == "path":
        raise SpecRefused(
            ("body", "data", "args", arg),
            f"data {spec.data.name!r} needs {field}: a folder under {settings.resolved_datasets_dir}",
        )
    try:
        path = inside_dataset_roots(spec.data.args.get(arg, "."), field, settings)
    except UnsafePath as exc:
        raise SpecRefused(("body", "data", "args", arg), str(exc)) from None
    data = spec.data.model_copy(update={"args": {**spec.data.args, arg: str(path)}})
    return spec.model_copy(update={"data": data})


def check_capacity(spec: JobSpec, settings: Settings) -> None:
    reason = capacity.check_fits(spec, settings)
    if reason:
        raise SpecRefused(("body", "nproc"), reason)


def apply(spec: JobSpec, settings: Settings) -> JobSpec:
    """Run every submit check; return the spec to store (paths resolved)."""
    check_plain_text(spec)
    check_single_node(spec)
    check_user_code(spec, settings)
    spec = check_resume_from(spec, settings)
    spec = check_data_paths(spec, settings)
    check_capacity(spec, settings)
    return spec
