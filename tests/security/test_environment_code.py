"""A package a job names must never run as the worker: building its environment installs wheels only (no
build code), and nothing the wheels bring may run outside the sandbox while the entry is made.

The attack: a wheel on the index with a `.pth` file whose line starts with `import` (any wheel may ship one,
and Python's `site` runs such a line at every interpreter start). uv's `--compile-bytecode` starts the
entry's own interpreter to compile, so the line ran as the worker (root here), unsandboxed, able to read the
API token and the database. Now the bytecode is compiled by the worker's interpreter with -I -S.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from tests.environments.conftest import make_wheel

prepare = importlib.import_module("worker.environments.prepare")  # the package exports a function of that name


def _wheel_with_pth(folder: Path, marker: Path) -> None:
    hook = f"import os; open({str(marker)!r}, 'a').write('ran as uid %d\\n' % os.getuid())\n"
    make_wheel(folder, "evilpth", "0.1", extra={"evilpth_hook.pth": hook})


def test_a_wheels_pth_does_not_run_while_its_environment_is_built(api_settings, tmp_path: Path) -> None:
    marker = tmp_path / "ran-outside-the-sandbox"
    wheels = tmp_path / "wheels"
    _wheel_with_pth(wheels, marker)
    settings = api_settings(
        environment_dir=tmp_path / "environments", environment_offline=True, environment_find_links=wheels
    )
    log = tmp_path / "env.log"
    ready = prepare._ensure(settings, "evilpth==0.1\n", prepare.service(), log, lambda: None, time.monotonic())
    assert not marker.exists(), f"the wheel's .pth ran as the worker: {marker.read_text()}\n{log.read_text()}"
    site = next(ready.root.glob("lib/python*/site-packages"))
    assert (site / "evilpth_hook.pth").is_file()  # installed as asked: it runs in the sandbox, as the job
    assert list((site / "evilpth" / "__pycache__").glob("__init__.*.pyc")), log.read_text()  # still compiled
