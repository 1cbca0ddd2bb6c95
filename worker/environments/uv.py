"""Running uv for an environment: resolve a lock, create a venv, install a lock into it.

Every command's output goes to the attempt's environment log (the job page shows its tail); a failing
command raises `UvFailed` with uv's own message (its error lines, without the progress noise) as what the
user reads first. uv runs with a small allow-listed environment: the worker's secrets (RANKZERO_*, the
database URL) never reach it, nor a package's build code. Options come from the settings only (index,
extra indexes, wheel folder, offline); uv reads no configuration file (UV_NO_CONFIG).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from core import run_files
from core.settings import Settings
from worker.environments import cache

MAX_HEADLINE_CHARS = 2000
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
              "http_proxy", "https_proxy", "no_proxy")  # fmt: skip


class UvFailed(RuntimeError):
    """uv exited non-zero (or ran past its time); the message is uv's own account."""


def uv_bin() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


def uv_env(cache: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in PASSED_ENV}
    env.update({"UV_CACHE_DIR": str(cache), "UV_NO_CONFIG": "1", "HOME": str(home), "NO_COLOR": "1",
                "UV_NO_PROGRESS": "1", "UV_PYTHON_DOWNLOADS": "never"})  # fmt: skip
    return env


def index_args(settings: Settings) -> list[str]:
    """uv's options for where packages come from (the server's settings only)."""
    args: list[str] = []
    if settings.environment_offline:
        args += ["--no-index", "--offline"]
    else:
        if settings.environment_index_url:
            args += ["--index-url", settings.environment_index_url]
        for url in settings.environment_extra_index_urls.split(","):
            args += ["--extra-index-url", url] if url else []
    if settings.environment_find_links is not None:
        args += ["--find-links", str(settings.environment_find_links)]
    return [*args, "--no-build"]  # wheels only: a package's build code would run as the worker, unsandboxed


def headline(output: str) -> str:
    """uv's account of a failure: its error lines (`error:`, `×`, `╰─▶` and what follows), else the tail."""
    lines = [ln.rstrip() for ln in output.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith(("error:", "×", "x "))), None)
    chosen = lines[start:] if start is not None else lines[-15:]
    text = "\n".join(ln.strip() for ln in chosen)
    return text[:MAX_HEADLINE_CHARS] or "uv failed without a message"


def compile_bytecode(site_packages: Path, settings: Settings, log: Path, tick: Callable[[], None],
                     timeout_s: float) -> None:  # fmt: skip
    """Byte-compile an entry's packages with the worker's own interpreter, isolated (-I) and without `site` (-S).

    Not uv's --compile-bytecode: that runs the entry's interpreter, whose start processes the `.pth` files of
    the wheels just installed, and a `.pth` line starting with `import` is code: any package on the index
    would run as the worker, outside the sandbox (tests/security/test_environment_code.py). compileall only
    compiles; the entry's interpreter is the worker's Python (`uv venv --python sys.executable`), so the
    bytecode is the one the ranks would write."""
    command = [sys.executable, "-I", "-S", "-m", "compileall", "-q", "-j", "0", str(site_packages)]
    run(command[1:], settings, log, tick, site_packages, timeout_s, program=sys.executable, check=False)


def run(  # noqa: PLR0913 (the program and whether its failure counts are for compile_bytecode)
    argv: Sequence[str],
    settings: Settings,
    log: Path,
    tick: Callable[[], None],
    cwd: Path,
    timeout_s: float,
    *,
    program: str | None = None,
    check: bool = True,
) -> None:
    """Run uv `argv` (after the binary; or `program`), its output appended to `log`; raise UvFailed with its
    message (unless `check` is False: a package whose file does not compile is no failed build)."""
    home = settings.resolved_environment_dir / ".uv-home"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = uv_env(settings.resolved_environment_dir / cache.UV_CACHE, home)
    runs = settings.resolved_runs_dir  # the log is in a run dir: no link the job made there is followed
    run_files.make_dirs(log.parent, runs)
    with run_files.open_file(log, "ab", runs) as out, cache.uv_cache_in_use(settings.resolved_environment_dir, tick):
        start = out.tell()
        out.write(f"$ {'uv' if program is None else Path(program).name} {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen([uv_bin() if program is None else program, *argv], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            tick()
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise UvFailed(f"uv ran past RANKZERO_ENVIRONMENT_BUILD_TIMEOUT_S ({timeout_s:.0f} s) and was stopped")
            time.sleep(0.05)
    if proc.returncode != 0 and check:
        with run_files.open_file(log, "rb", runs) as fh:
            fh.seek(start)
            raise UvFailed(headline(fh.read(200_000).decode(errors="replace")))
