"""The CLI's REST client: server URL and token from options, env (RANKZERO_URL, RANKZERO_API_TOKEN)
or the instance the environment's settings describe; every failure becomes a message that says what to do.

Finding the instance (`locate`): the URL is --url / RANKZERO_URL, else RANKZERO_HOST / RANKZERO_PORT when
set, else the profile `rankzero login` saved (RANKZERO_PROFILE, else the last one logged in to), else
what the running `rankzero up` / `rankzero api` of RANKZERO_DATA_DIR recorded in
`<data dir>/server.json` (so `up --port 9000` is found), else the default settings. The token is
--token / RANKZERO_API_TOKEN, else the profile's (when the URL is the profile's), else
`<data dir>/api_token`, read and never written: only `up` and `api` create one.

Profiles (issue 23) live in `profiles.json` in RANKZERO_CONFIG_DIR (default $XDG_CONFIG_HOME/rankzero,
else ~/.config/rankzero), a folder 0700 and a file 0600, replaced atomically.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # imported where used: `rankzero --help` and a command's start need neither (issue 29)
    import httpx

    from core.settings import Settings

SERVER_FILE = "server.json"


class CliError(Exception):
    """A failure the user can fix; the message says how."""


class Listens(Protocol):
    """Where an instance listens: `Settings` (the service's) or `Local` (what the client reads)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class HasDataDir(Protocol):
    @property
    def data_dir(self) -> Path: ...


@dataclass(frozen=True)
class Local:
    """The four settings a client command reads (RANKZERO_HOST, _PORT, _DATA_DIR, _API_TOKEN), read from the
    environment as core/settings.py reads them (names in any case, the same defaults), without building the
    whole Settings: pydantic-settings alone costs a command 0.25 s of CPU (issue 29). The settings' own
    defaults are the reference: tests/cli/test_cli_start.py compares the two on a table of environments."""

    host: str
    port: int
    data_dir: Path
    api_token: str | None


def local_settings(environ: Mapping[str, str] | None = None) -> Local:
    """`Local` from `environ` (default: this process's); CliError naming the variable when one is invalid."""
    env = {k.upper(): v for k, v in (os.environ if environ is None else environ).items()}
    raw_port = env.get("RANKZERO_PORT")
    port = 8000
    if raw_port is not None:
        try:
            number = float(raw_port.strip())  # as the settings read it: "9000" and "9000.0" alike
        except ValueError:
            number = 0.0
        port = int(number) if number.is_integer() else 0
        if not 1 <= port <= 65535:
            raise CliError(f"RANKZERO_PORT must be a port number from 1 to 65535, not {raw_port[:40]!r}")
    data_dir = env.get("RANKZERO_DATA_DIR")
    return Local(
        host=env.get("RANKZERO_HOST", "127.0.0.1"),
        port=port,
        data_dir=Path(data_dir) if data_dir is not None else Path.home() / ".rankzero",
        api_token=env.get("RANKZERO_API_TOKEN"),
    )


def skip_httpx_cli() -> None:
    """Call before `import httpx`: httpx's `__init__` imports its own command-line client (`httpx._main`:
    click, rich's progress and syntax, pygments; 0.07 s of CPU) whenever those are installed, and here they
    are (typer, rich). Marked absent, it falls back to the stub it keeps for a missing CLI, unused here."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # pyright: ignore[reportArgumentType]


def default_url(settings: Listens) -> str:
    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # a wildcard bind is reached on loopback from this host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


@dataclass(frozen=True)
class Instance:
    """Where the CLI sends requests and with which token, and where each came from (for messages)."""

    url: str
    url_from: str
    token: str
    token_from: str


def _env_names(*names: str) -> list[str]:
    upper = {k.upper() for k in os.environ}
    return [n for n in names if n in upper]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def record_server(settings: Settings, url: str) -> Path:
    """`up` / `api`: say in the data dir where this instance listens (owner-only; replaced atomically)."""
    from core.settings import write_private

    settings.ensure_data_dir()
    path = settings.data_dir / SERVER_FILE
    tmp = path.with_name(f".{SERVER_FILE}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    write_private(tmp, json.dumps({"url": url, "pid": os.getpid()}))
    tmp.replace(path)
    return path


def forget_server(settings: Settings) -> None:
    """Remove the record when it is this process's own."""
    path = settings.data_dir / SERVER_FILE
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def recorded_url(settings: HasDataDir) -> str | None:
    """The URL a live `up` / `api` of this data dir recorded, else None."""
    try:
        record = json.loads((settings.data_dir / SERVER_FILE).read_text())
        url, pid = record["url"], int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return url if isinstance(url, str) and _alive(pid) else None


PROFILES_FILE = "profiles.json"
PROFILE_NAME = r"^[A-Za-z0-9._-]{1,40}$"


def config_dir() -> Path:
    if explicit := os.environ.get("RANKZERO_CONFIG_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rankzero"


def read_profiles() -> dict[str, Any]:
    """{"default": name, "profiles": {name: {"url", "token"}}}; empty when there is no (readable) file."""
    try:
        data = json.loads((config_dir() / PROFILES_FILE).read_text())
    except (OSError, ValueError):
        return {"default": None, "profiles": {}}
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        return {"default": None, "profiles": {}}
    return data


def write_profiles(data: dict[str, Any]) -> Path:
    """Save the profiles owner-only (the folder 0700, the file 0600), replacing the file atomically."""
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    path = folder / PROFILES_FILE
    from core.settings import write_private

    tmp = path.with_name(f".{PROFILES_FILE}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    write_private(tmp, json.dumps(data, indent=2))
    tmp.replace(path)
    return path


def saved_profile() -> tuple[str, dict[str, str]] | None:
    """The profile in use: RANKZERO_PROFILE's, else the default one; None when there is none."""
    data = read_profiles()
    name = os.environ.get("RANKZERO_PROFILE") or data.get("default")
    profile = data["profiles"].get(name) if isinstance(name, str) else None
    if os.environ.get("RANKZERO_PROFILE") and profile is None:
        raise CliError(f"no profile {name!r} in {config_dir() / PROFILES_FILE}: `rankzero login URL --profile {name}`")
    ok = isinstance(profile, dict) and isinstance(profile.get("url"), str) and isinstance(profile.get("token"), str)
    return (str(name), profile) if ok else None  # pyright: ignore[reportReturnType]  (checked: dict of str)


def locate(settings: Local, url: str | None = None, token: str | None = None) -> Instance:
    """The server and token of the instance `settings` (the environment) describes. Never writes a file."""
    profile = None
    if url:
        url_from = "--url / RANKZERO_URL"
    elif named := _env_names("RANKZERO_HOST", "RANKZERO_PORT"):
        url, url_from = default_url(settings), " / ".join(named)
    elif profile := saved_profile():
        url, url_from = profile[1]["url"], f"profile {profile[0]} ({config_dir() / PROFILES_FILE})"
    elif found := recorded_url(settings):
        url, url_from = found, str(settings.data_dir / SERVER_FILE)
    else:
        url, url_from = default_url(settings), "the default settings"
    if token:
        token_from = "--token / RANKZERO_API_TOKEN"
    elif profile is not None:
        token, token_from = profile[1]["token"], f"profile {profile[0]}"
    elif settings.api_token is not None:
        token, token_from = settings.api_token.strip(), "RANKZERO_API_TOKEN"
    else:
        path = settings.data_dir / "api_token"
        try:
            token = path.read_text().strip()
        except OSError:
            raise CliError(
                f"no API token: {path} does not exist (RANKZERO_DATA_DIR is {settings.data_dir}). Set "
                "RANKZERO_DATA_DIR to the data dir of the server's `rankzero up`, or pass --token / set "
                "RANKZERO_API_TOKEN"
            ) from None
        # Its strength is the server's to judge (it refuses to start with a weak one, and answers 401 to a
        # token it does not know): the client only sends it.
        token_from = str(path)
    if not token:
        raise CliError(f"the API token from {token_from} is empty: pass --token or set RANKZERO_API_TOKEN")
    return Instance(url, url_from, token, token_from)


class Api:
    def __init__(self, url: str, token: str, timeout: float = 30.0, *, instance: Instance | None = None) -> None:
        self.url = url.rstrip("/")
        self.instance = instance
        skip_httpx_cli()
        import httpx

        # Every request is a path under `url` and redirects are not followed, so a plain http:// instance
        # never speaks TLS: loading the CA bundle (certifi, 0.04 s of CPU) is for an https:// one only.
        self.http = httpx.Client(
            base_url=self.url + "/api",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            verify=self.url.lower().startswith("https://"),
        )

    def _check(self, r: httpx.Response) -> httpx.Response:
        if r.status_code == 401:
            raise CliError(rejected_token(self.url, self.instance.token_from if self.instance else None))
        if r.status_code == 404:
            raise CliError(in_cli_words(_detail(r)) or f"not found: {r.request.url.path}")
        if r.status_code == 422:
            is_spec = r.request.method == "POST" and r.request.url.path.endswith("/api/jobs")
            raise CliError("the server refused the request:\n" + _detail(r, spec_hints=is_spec))
        if r.status_code >= 400:
            raise CliError(f"{r.status_code} from {r.request.method} {r.request.url.path}: {one_problem(_detail(r))}")
        return r

    def request(self, method: str, path: str, **kw: Any) -> Any:
        return self._send(method, path, **kw).json()

    def request_empty(self, method: str, path: str, **kw: Any) -> None:
        """A request whose answer has no body (204)."""
        self._send(method, path, **kw)

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        skip_httpx_cli()
        import httpx

        try:
            r = self.http.request(method, path, **kw)
        except httpx.TransportError as exc:
            source = f", from {self.instance.url_from}" if self.instance else ""
            raise CliError(
                f"cannot reach the API at {self.url}{source} ({exc}): start it with `rankzero up`, "
                "or pass --url / set RANKZERO_URL (or RANKZERO_PORT / RANKZERO_DATA_DIR as the server has them)"
            ) from None
        return self._check(r)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, json: Any = None) -> Any:
        return self.request("POST", path, json=json)

    @contextmanager
    def stream(self, path: str) -> Iterator[httpx.Response]:
        skip_httpx_cli()
        import httpx

        try:
            with self.http.stream("GET", path, timeout=None) as r:
                if r.status_code >= 400:
                    r.read()
                self._check(r)
                yield r
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach the API at {self.url} ({exc}): is it running?") from None


# The API's advice names its routes; at the CLI the same advice is a command.
REST_ADVICE_IN_CLI_WORDS = {
    "list jobs with GET /api/jobs": "list jobs with `rankzero jobs`",
    "list them with GET /api/jobs/{id}/checkpoints": "list a job's with `rankzero checkpoints JOB`",
    "list hosts with GET /api/hosts": "list hosts with `rankzero hosts`",
    "list users with GET /api/users (admin)": "list users with `rankzero users list` (admin)",
    ": GET /api/users/{name}/tokens": ": list a user's with `rankzero tokens list USER`",
}


def rejected_token(url: str, token_from: str | None) -> str:
    """What to do about a 401: a saved profile's token was most likely revoked (a user's own token: a new one
    from an admin); a server token is the one `rankzero up` prints, or the data dir's."""
    source = f" from {token_from}" if token_from else ""
    said = f"the API at {url} rejected the token{source} (invalid or revoked)"
    if token_from and token_from.startswith("profile "):
        return (f"{said}: ask an admin for a new token (`rankzero tokens add USER NAME`), then "
                f"`rankzero login {url}` with it")  # fmt: skip
    return (f"{said}: pass --token or set RANKZERO_API_TOKEN (`rankzero up` prints the server's; a user's own "
            f"token: `rankzero login {url}`), or set RANKZERO_DATA_DIR to the server's data dir")  # fmt: skip


def one_problem(detail: str) -> str:
    """A detail of one problem on the error's own line (a list detail's item is indented for a list of them)."""
    return detail.strip() if "\n" not in detail.strip() else "\n" + detail


def in_cli_words(detail: str) -> str:
    for rest, cli in REST_ADVICE_IN_CLI_WORDS.items():
        detail = detail.replace(rest, cli)
    return detail


def _detail(r: httpx.Response, *, spec_hints: bool = False) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text[:500]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):
        return "\n".join(_problem(d, spec_hints=spec_hints) for d in detail if isinstance(d, dict))
    return str(detail)


def _problem(d: dict[str, Any], *, spec_hints: bool = False) -> str:
    """One 422 item as `  field: sentence` (pydantic's "Value error, " dropped; no field: the sentence alone).
    `spec_hints`: the body was a job spec, so a misspelt field gets the spec's nearest name."""
    loc = [x for x in d.get("loc", []) if x != "body"]
    where = ".".join(str(x) for x in loc)
    msg = str(d.get("msg", "")).removeprefix("Value error, ")
    if spec_hints and d.get("type") == "extra_forbidden" and loc:
        msg = unknown_spec_field(loc)
    return f"  {where}: {msg}" if where else f"  {msg}"


def unknown_spec_field(loc: list[Any]) -> str:
    """What to say of a job spec field the spec does not have (`maxsteps`): its nearest name, if one is close."""
    import difflib

    names = spec_field_names(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"the spec has no field {str(loc[-1])!r}: {hint}(`rankzero schema` lists every field)"


def spec_field_names(path: list[Any]) -> list[str]:
    """The field names of the job spec's section at `path` (e.g. ["optimizer"]); [] where it is no section."""
    import typing

    from pydantic import BaseModel

    from trainer.spec import JobSpec

    model: type[BaseModel] = JobSpec
    for key in path:
        field = model.model_fields.get(str(key))
        if field is None:
            return []
        kinds = (field.annotation, *typing.get_args(field.annotation))  # a section, or one of a union's
        sections = [a for a in kinds if isinstance(a, type) and issubclass(a, BaseModel)]
        if not sections:
            return []
        model = sections[0]
    return list(model.model_fields)
