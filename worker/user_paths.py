"""What a user reads names no path of the worker's (issue 19 item 5): in a job's error and timeline, the
worker's folders become names the user knows — a file of the run dir its run-dir-relative path
(`checkpoints/step_00000040.pt`), the run dir itself "the run dir", the job's code "<code>", the rest
"<runs dir>", "<data dir>". Tracebacks from the job's own code name its files this way too.

`scrub` is pure; `for_job` gives the worker's folders for one job (from its settings).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from core.settings import Settings
from trainer.run_dir import job_run_dir


def for_job(settings: Settings, job_id: int) -> dict[str, str]:
    """The worker's folders a job's words may hold → what the user reads instead."""
    from worker.bundles import cache_dir

    run_root = job_run_dir(settings.resolved_runs_dir, job_id)
    names = {
        str(run_root): "the run dir",
        str(cache_dir(settings)): "<code>",
        str(settings.resolved_runs_dir): "<runs dir>",
        str(settings.data_dir): "<data dir>",
    }
    for path in list(names):  # the same folders as resolved (symlinks) and as given
        with_links = str(_resolved(path))
        names.setdefault(with_links, names[path])
    return names


def _resolved(path: str) -> str:
    from pathlib import Path

    try:
        return str(Path(path).resolve())
    except OSError:
        return path


def scrub(text: str | None, names: Mapping[str, str]) -> str | None:
    """`text` with each folder of `names` (and what lies under it) told by its user-facing name: a path under
    the run dir becomes relative to it, a bundle's `<sha256>/` is dropped after "<code>"."""
    if not text:
        return text
    for folder in sorted(names, key=len, reverse=True):  # the deepest first: the run dir before the runs dir
        if not folder or folder == "/":
            continue
        name = names[folder]
        pattern = re.escape(folder.rstrip("/")) + r"(?![\w.-])(/[0-9a-f]{64})?(/?)"  # not /runs/job_1 in job_12
        if name == "the run dir":
            text = re.sub(pattern, lambda m: "" if m.group(2) else "the run dir", text)
        else:
            text = re.sub(pattern, lambda m, n=name: n + m.group(2), text)
    return text
