"""A package a job names must never run as the worker: building its environment installs wheels only (no
build code), and nothing the wheels bring may run outside the sandbox while the entry is made.

The attack: a wheel on the index with a `.pth` file whose line starts with `import` (any wheel may ship one,
and Python's `site` runs such a line at every interpreter start). uv's `--compile-bytecode` starts the
entry's own interpreter to compile, so the line ran as the worker (root here), unsandboxed, able to read the
API token and the database. Now the bytecode is compiled by the worker's interpreter with -I -S.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import time
import zipfile
from pathlib import Path

prepare = importlib.import_module("worker.environments.prepare")  # the package exports a function of that name


def _wheel_with_pth(folder: Path, marker: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    dist = "evilpth-0.1.dist-info"
    files = {
        "evilpth_hook.pth": f"import os; open({str(marker)!r}, 'a').write('ran as uid %d\\n' % os.getuid())\n",
        "evilpth/__init__.py": "VALUE = 1\n",
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: evilpth\nVersion: 0.1\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: rankzero-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / "evilpth-0.1-py3-none-any.whl", "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)


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
