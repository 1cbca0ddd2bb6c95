"""The `rankzero` Typer app and what every command shares: the consoles, the --url/--token options, the
settings, the API client, and failing with a message (exit 1, or 2 for a usage/settings problem).

Service commands (cli/service_commands.py) and job commands (cli/job_commands.py) register on `app`;
cli/main.py assembles them.

What a job says (names, errors, tracebacks, logs) prints verbatim: never as rich markup.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar, cast

import typer

from cli.client import Api, CliError, local_settings, locate

if TYPE_CHECKING:  # imported where used: `rankzero --help` and a command's start need none of them (issue 29)
    from rich.console import Console

    from core.settings import Settings

T = TypeVar("T")

# rich_markup_mode=None: click's plain help and usage errors. With rich's (typer's default when rich is
# installed) `--help` imported rich's markdown, traceback and pretty modules: 0.16 s of CPU, half the start.
app = typer.Typer(help="rankzero: PyTorch training jobs (torchrun DDP / gradient accumulation) behind a REST API.",
                  no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None)  # fmt: skip


class _LazyConsole:
    """A rich Console made on its first use: importing rich costs a command's start 0.05 s of CPU, and
    `--help`, a usage error or a command that prints nothing never needs it (issue 29)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def made(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.made(), name)

    # Special methods are looked up on the type, not through __getattr__: rich's Live (a progress bar)
    # enters its console as a context (its render buffer).
    def __enter__(self) -> Console:
        return self.made().__enter__()

    def __exit__(self, *exc: object) -> None:
        self.made().__exit__(*exc)  # pyright: ignore[reportArgumentType]


console = cast("Console", _LazyConsole(emoji=False))
err = cast("Console", _LazyConsole(stderr=True, emoji=False))

UrlOpt = Annotated[
    str | None, typer.Option("--url", envvar="RANKZERO_URL", help="API base URL (default: the local settings).")
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="RANKZERO_API_TOKEN", help="API token (default: the local one).", show_default=False
    ),
]


def client_for(url: str | None, token: str | None) -> Api:
    """The API client for --url/--token, else the instance the local settings describe (cli/client.py `locate`)."""
    # Only the settings that find the instance are read (cli/client.py `local_settings`), not the service's
    # whole Settings: a client command has no use for the rest, and loading them costs 0.25 s of CPU.
    try:
        settings = local_settings()
    except CliError as exc:
        fail(f"invalid settings: {exc}", code=2)
    try:
        found = locate(settings, url, token)
        return Api(found.url, found.token, instance=found)
    except (CliError, ValueError) as exc:  # no token file, an empty one, a bad profile
        fail(str(exc), code=2)


def fail(message: str, code: int = 1) -> NoReturn:
    from rich.text import Text

    err.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)
    raise typer.Exit(code)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment (+ overrides); an invalid one (a short RANKZERO_API_TOKEN) exits 2 saying why."""
    from pydantic import ValidationError

    from core.settings import Settings

    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(f"RANKZERO_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        fail(f"invalid settings: {problems}", code=2)


def private_files() -> None:
    """Everything this process and its children create (data dir, database, token, logs, runs) is owner-only."""
    os.umask(0o077)


def call(fn: Callable[[], T]) -> T:
    """`fn()`, or exit 1 with the API's (or the network's) message."""
    try:
        return fn()
    except CliError as exc:
        fail(str(exc))
