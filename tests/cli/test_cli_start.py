"""A client command reads only the four settings that find its instance (cli/client.py `local_settings`),
without building the service's Settings (pydantic-settings: 0.25 s of CPU at every start, issue 29). They
must read the environment exactly as core/settings.py does, so the two are compared on a table of
environments; an invalid one is refused naming its variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.client import CliError, Local, local_settings, locate
from core.settings import Settings

TOKEN = "k" * 40


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"RANKZERO_PORT": "9000"},
        {"RANKZERO_PORT": " 9001 "},
        {"RANKZERO_PORT": "9002.0"},
        {"RANKZERO_HOST": "0.0.0.0", "RANKZERO_PORT": "1"},
        {"RANKZERO_HOST": "::1", "RANKZERO_PORT": "65535"},
        {"rankzero_port": "8123", "Rankzero_Host": "10.1.2.3"},  # names in any case, as pydantic-settings reads them
        {"RANKZERO_DATA_DIR": "/srv/rankzero"},
        {"RANKZERO_DATA_DIR": "relative/dir"},
        {"RANKZERO_API_TOKEN": TOKEN},
    ],
    ids=repr,
)
def test_the_client_reads_the_environment_as_the_settings_do(env: dict[str, str], monkeypatch) -> None:
    for name in [k for k in os.environ if k.upper().startswith("RANKZERO_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()  # pyright: ignore[reportCallIssue]
    token = settings.api_token.get_secret_value() if settings.api_token else None
    assert local_settings() == Local(settings.host, settings.port, settings.data_dir, token)


@pytest.mark.parametrize("port", ["0", "65536", "http", "80a", "-1", "1.5"])
def test_an_invalid_port_is_refused_naming_the_variable(port: str) -> None:
    with pytest.raises(CliError, match="RANKZERO_PORT must be a port number"):
        local_settings({"RANKZERO_PORT": port})
    with pytest.raises(ValueError):  # the settings refuse it too
        Settings(port=port)  # pyright: ignore[reportCallIssue, reportArgumentType]


def test_the_token_file_is_read_stripped_and_an_empty_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "api_token").write_text(f"{TOKEN}\n")
    found = locate(Local("127.0.0.1", 8000, tmp_path, None), url="http://h:1")
    assert (found.token, found.token_from) == (TOKEN, str(tmp_path / "api_token"))
    (tmp_path / "api_token").write_text("\n")
    with pytest.raises(CliError, match="is empty"):
        locate(Local("127.0.0.1", 8000, tmp_path, None), url="http://h:1")


def test_an_invalid_port_exits_2_saying_which_setting(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RANKZERO_")}
    env |= {"RANKZERO_PORT": "eighty", "RANKZERO_DATA_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "cli.main", "jobs"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "invalid settings: RANKZERO_PORT" in r.stderr, r.stderr


def test_httpx_imports_without_its_command_line() -> None:
    """httpx's own CLI (click, rich, pygments) is never imported by the client; httpx still works."""
    code = (
        "import sys\nfrom cli.client import skip_httpx_cli\nskip_httpx_cli()\nimport httpx\n"
        "assert httpx.URL('http://h/a').path == '/a'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'pygments', 'rich')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_the_consoles_import_rich_on_first_use_and_serve_a_progress_bar() -> None:
    """cli/app.py's consoles are made when first used (`--help` never imports rich); rich's Live enters the
    console as a context, which a stand-in must pass on too (`submit --follow`, `follow`, the upload bar)."""
    import io

    from rich.progress import Progress

    from cli.app import _LazyConsole

    console = _LazyConsole(file=io.StringIO(), force_terminal=True, width=60)
    with Progress(console=console) as progress:  # pyright: ignore[reportArgumentType]
        task = progress.add_task("job 7", total=4)
        progress.update(task, advance=4)
    console.print("done")
    assert "job 7" in console.file.getvalue() and "done" in console.file.getvalue()
