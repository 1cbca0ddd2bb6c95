"""`rankzero --help` and every command start fast (issue 29: ≤ 0.3 s): importing the CLI, printing any
command's help, and each command up to its first request import only what that command needs (never the
ORM, torch, the service's settings, the spec model; the HTTP client and rich only where a command talks
to the API or prints a table). Asserted as a mechanism (which modules got imported), never as a time;
the times are bench/all.py's `cli` table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import app

ROOT = Path(__file__).resolve().parents[2]
# Never at a command's start: the service's parts, torch, the settings' validation, the spec model.
NEVER = ("torch", "sqlalchemy", "sqlmodel", "celery", "kombu", "fastapi", "numpy", "pydantic_settings", "core",
         "api", "worker", "trainer.spec", "optuna")  # fmt: skip
# Nor what only a command that runs needs: the HTTP client and rich (tables, colours), YAML (a spec
# file); nor typer's rich help (rich's markdown, pygments) or httpx's own command line (click).
NOT_AT_HELP = (*NEVER, "httpx", "rich", "yaml", "markdown_it", "pygments", "click")


def _imported_by(code: str, env: dict[str, str] | None = None) -> set[str]:
    """Every module (and its packages: `a.b` gives `a` and `a.b`) that `code` left in sys.modules."""
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=env)  # fmt: skip
    names = json.loads(out.stderr.strip().splitlines()[-1])
    return {".".join(n.split(".")[: i + 1]) for n in names for i in range(len(n.split(".")))}


def _started(args: list[str], env: dict[str, str] | None = None) -> set[str]:
    """The modules `rankzero ARGS` imported by the time it exited (SystemExit caught: help, usage, exit 1)."""
    run = "import cli.main\ntry:\n    cli.main.app()\nexcept SystemExit:\n    pass"
    code = f"sys.argv = ['rankzero', *{args!r}]\n{run}"
    return _imported_by(code, env)


def _commands() -> list[list[str]]:
    """Every command and sub-command as argv, from the app itself (a new command is covered as it lands)."""
    import typer.main

    root = typer.main.get_command(app)
    found: list[list[str]] = []
    for name, command in root.commands.items():  # pyright: ignore[reportAttributeAccessIssue]
        found.append([name])
        found += [[name, sub] for sub in getattr(command, "commands", {})]
    return found


def test_importing_the_cli_imports_no_heavy_library() -> None:
    loaded = _imported_by("import cli.main")
    assert sorted(loaded & set(NOT_AT_HELP)) == []


def test_the_command_list_covers_every_area() -> None:
    names = {c[0] for c in _commands()}
    assert {"up", "submit", "jobs", "show", "logs", "sweep", "users", "outputs", "environment"} <= names
    assert ["users", "add"] in _commands()


@pytest.mark.parametrize("args", [[], *_commands()], ids=lambda a: " ".join(a) or "rankzero")
def test_a_commands_help_imports_no_heavy_library(args: list[str]) -> None:
    loaded = _started([*args, "--help"])
    assert sorted(loaded & set(NOT_AT_HELP)) == []


def test_a_usage_error_is_plain_click_not_rich() -> None:
    loaded = _started(["jobs", "--no-such-option"])
    assert sorted(loaded & set(NOT_AT_HELP)) == []


def _no_server(tmp_path: Path) -> dict[str, str]:
    """An environment whose instance is not running: a command gets as far as its first request and fails."""
    import os

    data = tmp_path / "data"
    data.mkdir()
    (data / "api_token").write_text("t" * 43)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    return env | {"RANKZERO_DATA_DIR": str(data), "RANKZERO_PORT": "9", "RANKZERO_CONFIG_DIR": str(tmp_path / "cfg")}


@pytest.mark.parametrize(
    "args",
    [["jobs"], ["show", "1"], ["logs", "1"], ["metrics", "1"], ["hosts"], ["cancel", "1"], ["whoami"],
     ["users", "list"], ["outputs", "1"], ["sweeps"], ["environment", "1"]],
    ids=" ".join,
)  # fmt: skip
def test_a_command_that_talks_to_the_api_imports_the_client_but_not_the_service(
    args: list[str], tmp_path: Path
) -> None:
    loaded = _started(args, _no_server(tmp_path))
    assert "httpx" in loaded  # it got as far as its request (and failed: nothing listens on port 9)
    assert sorted(loaded & {*NEVER, "yaml", "click", "pygments", "markdown_it"}) == []


def test_submit_reads_its_spec_without_the_spec_model(tmp_path: Path) -> None:
    """`rankzero submit spec.yaml` reads the file (yaml) and posts it: the server validates it, the CLI imports
    neither the spec model nor the sweep space (`--set` and `--code` do: they check before they send)."""
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\nmodel: {name: mlp}\ndata: {name: digits}\n")
    loaded = _started(["submit", str(spec)], _no_server(tmp_path))
    assert {"httpx", "yaml"} <= loaded
    assert sorted(loaded & {*NEVER, "click", "pygments", "markdown_it"}) == []
