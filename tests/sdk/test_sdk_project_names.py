"""A project with a `trainer.py` or a `trainer/` package of its own (a common name) uses the SDK: `import
rankzero` finds the service's `trainer` for itself and leaves the project's to the project, whichever is imported
first (rankzero/_service.py). Each case runs a real script in a process of its own, as a rank does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys
{first}
import torch
rankzero.log(3, {{"loss": torch.tensor(0.5)}})
rankzero.progress(3, 10)
rankzero.save_checkpoint({{"w": torch.ones(2)}}, step=3)
rankzero.flush()
import trainer as mine
print("mine:", mine.WHOSE, "| ours kept:", type(rankzero.load_checkpoint()).__name__)
"""


@pytest.mark.parametrize("layout", ["module", "package"])
@pytest.mark.parametrize("first", ["import trainer\nimport rankzero", "import rankzero\nimport trainer"])
def test_a_project_with_its_own_trainer_uses_the_sdk(layout: str, first: str, tmp_path: Path) -> None:
    project, run = tmp_path / "project", tmp_path / "run"
    project.mkdir()
    if layout == "module":
        (project / "trainer.py").write_text("WHOSE = 'the project'\n")
    else:
        (project / "trainer").mkdir()
        (project / "trainer" / "__init__.py").write_text("WHOSE = 'the project'\n")
    (project / "train.py").write_text(SCRIPT.format(first=first))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_") and k not in ("RANK", "WORLD_SIZE")}
    env |= {"PYTHONPATH": os.pathsep.join([str(project), str(ROOT)]), "RANKZERO_RUN_DIR": str(run)}
    done = subprocess.run([sys.executable, "train.py"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "mine: the project | ours kept: dict" in done.stdout
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert {"metric", "progress", "checkpoint"} <= {e["type"] for e in events}, events
    assert any(e["type"] == "metric" and e.get("name") == "loss" and e.get("value") == 0.5 for e in events)


def test_where_the_name_is_the_services_nothing_is_loaded_twice() -> None:
    """In the service's own processes (and these tests) `trainer` is ours: the SDK shares its modules."""
    import rankzero
    import trainer.events
    from rankzero import _runtime

    assert rankzero.EXIT_STOPPED == 75
    assert _runtime.EventLog is trainer.events.EventLog
    assert sys.modules["trainer"].__file__ == str(ROOT / "trainer" / "__init__.py")
