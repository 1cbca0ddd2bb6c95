"""The `rankzero` Typer app and what every command shares: the consoles, the --url/--token options, the
settings, the API client, and failing with a message (exit 1, or 2 for a usage/settings problem).

Service commands (cli/service_commands.py) and job commands (cli/job_commands.py) register on `app`;
cli/main.py assembles them.

What a job says (names, errors, tracebacks, logs) prints verbatim: never as rich markup.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from cli.client import Api, CliError, locate

if TYPE_CHECKING:  # imported where used: `rankzero --help` and a command's start need no settings (issue 29)
    from core.settings import Settings

T = TypeVar("T")

app = typer.Typer(help="rankzero: PyTorch training jobs (torchrun DDP / gradient accumulation) behind a REST API.",
                  no_args_is_help=True, pretty_exceptions_enable=False)  # fmt: skip
console = Console(emoji=False)
err = Console(stderr=True, emoji=False)

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
    # A token given here is only sent, never served: the local settings need not accept it.
    settings = load_settings(api_token=None) if token else load_settings()
    try:
        found = locate(settings, url, token)
        return Api(found.url, found.token, instance=found)
    except (CliError, ValueError) as exc:  # no token file, or a weak token in it
        fail(str(exc), code=2)


def fail(message: str, code: int = 1) -> NoReturn:
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
