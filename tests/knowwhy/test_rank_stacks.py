"""worker/rank_stacks.py: where py-spy cannot give a rank's stacks, the job gets a sentence saying why and what
would let it, never an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from worker import rank_stacks


def test_no_py_spy_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_stacks, "py_spy", lambda: None)
    dumped = rank_stacks.dump(1, 1)
    assert dumped.text is None and dumped.unavailable is not None and "py-spy is not installed" in dumped.unavailable


def test_a_refused_attach_names_the_rank_and_what_would_allow_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    refusing = tmp_path / "py-spy"  # stands for py-spy under ptrace_scope 3: the attach is refused
    refusing.write_text(
        "#!/bin/sh\necho 'Error: Permission Denied: Try running again with elevated permissions' >&2\nexit 1\n"
    )
    refusing.chmod(0o755)
    monkeypatch.setattr(rank_stacks, "py_spy", lambda: str(refusing))
    dumped = rank_stacks.dump(4242, 1)
    assert dumped.text is None and dumped.unavailable is not None
    assert dumped.unavailable.startswith("py-spy could not attach to rank 1 (pid 4242): Error: Permission Denied")
    assert rank_stacks.HOW_TO_ALLOW in dumped.unavailable


def test_a_live_process_gives_its_frames() -> None:
    if rank_stacks.py_spy() is None:
        pytest.fail("py-spy is a dependency: reinstall the environment")
    code = "import time\ndef waits_here():\n    time.sleep(60)\nprint('up', flush=True)\nwaits_here()\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"  # in the function by now
        dumped = rank_stacks.dump(proc.pid, 0)
    finally:
        proc.kill()
        proc.wait()
    assert dumped.unavailable is None and dumped.text is not None and "waits_here" in dumped.text, dumped
