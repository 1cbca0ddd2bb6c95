"""Issue 22 part A, end to end (real API, Celery worker, torchrun on CPU ranks):

- a rank that raises with the SDK in use fails the job with its own exception as the headline, and the
  SDK's exit hook skipped its flush (it never waits on peers after a crash);
- a cancelled script job continued with `rankzero resume JOB --checkpoint STEP` gets that checkpoint from
  `rankzero.load_checkpoint()` and ends at the weights of an uninterrupted run; `${RANKZERO_RUN_DIR}` and
  `${RANKZERO_JOB_ID}` in its entrypoint are the job's own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.scripts.conftest import PROJECTS, script_spec
from tests.support.commands import RANKZERO, ROOT


def _log(client: Any, job_id: int, rank: int, stream: str) -> str:
    r = client.http.get(f"/jobs/{job_id}/logs", params={"rank": rank, "stream": stream})
    r.raise_for_status()
    return r.json()["text"]


def _cli(settings: Any, client: Any, tmp_path: Path, *args: str) -> str:
    env = {
        **os.environ,
        "RANKZERO_URL": str(client.http.base_url).removesuffix("/").removesuffix("/api"),
        "RANKZERO_API_TOKEN": settings.token(),
        "COLUMNS": "200",
        "XDG_CACHE_HOME": str(tmp_path / "cli-cache"),
    }
    done = subprocess.run([RANKZERO, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_crash_on_rank_1_is_the_headline_and_the_sdk_does_not_wait(service, workers, project, upload) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, project("sdk_crash"))
    job = client.submit(script_spec("crash", code, "train.py", nproc=2))
    done = client.wait_terminal(job["id"], timeout=120)
    assert done["status"] == "failed", done
    assert done["failed_rank"] == 1, done
    headline = done["error"].splitlines()[0]
    assert headline.startswith("rank 1 failed with exit code 1: NameError: name 'undefined_batch' is not defined"), (
        done["error"]
    )
    stderr = _log(client, job["id"], 1, "stderr")
    # The exit hook saw the crash and skipped the flush (no bounded wait on rank 0 either).
    assert "rankzero: exiting on an uncaught exception" in stderr, stderr
    assert "were not written" not in stderr, stderr


def _reference_weights(tmp_path: Path) -> str:
    """The same script run by hand, uninterrupted (local mode: no service, no checkpoints)."""
    out = tmp_path / "reference.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANKZERO_", "WORLD_SIZE", "RANK"))}
    env["PYTHONPATH"] = str(ROOT)
    subprocess.run(
        [sys.executable, str(PROJECTS / "sdk_resume" / "train.py"), "--out", str(out)],
        check=True, env=env, timeout=120, capture_output=True,
    )  # fmt: skip
    return out.read_text()


def test_a_cancelled_script_job_resumed_from_its_second_checkpoint_ends_exact(
    service, workers, project, upload, tmp_path
) -> None:
    settings, client = service(cancel_grace_s=3.0)
    workers.start(settings)
    code = upload(client, project("sdk_resume"))
    entry = "train.py --wait-after 5 --out ${RANKZERO_RUN_DIR}/final.txt --job ${RANKZERO_JOB_ID}"
    first = client.submit(script_spec("resumable", code, entry))
    client.wait(first["id"], lambda j: "waiting" in _log(client, j["id"], 0, "stdout"), 120, "waiting")

    def steps() -> list[int]:
        return [c["step"] for c in client.http.get(f"/jobs/{first['id']}/checkpoints").json()]

    client.wait(first["id"], lambda _: len(steps()) >= 2, 60, "two checkpoint rows")  # ingested a tick later
    assert sorted(steps()) == [2, 4], steps()
    client.http.post(f"/jobs/{first['id']}/cancel").raise_for_status()
    assert client.wait_terminal(first["id"], timeout=60)["status"] == "cancelled"
    assert f"job {first['id']} starts after step 0" in _log(client, first["id"], 0, "stdout")

    # From the second checkpoint (step 4), not the newest-looking state (step 5 was trained, never saved).
    said = _cli(settings, client, tmp_path, "resume", str(first["id"]), "--checkpoint", "4")
    assert "load_checkpoint" in said, said
    queued = re.search(r"job (\d+) queued", said)
    assert queued, said
    new_id = int(queued.group(1))
    done = client.wait_terminal(new_id, timeout=120)
    assert done["status"] == "succeeded", done
    out = _log(client, new_id, 0, "stdout")
    assert f"job {new_id} starts after step 4" in out, out
    final = settings.resolved_runs_dir / f"job_{new_id}" / "final.txt"
    assert final.read_text() == _reference_weights(tmp_path)


def test_the_merged_console_interleaves_two_ranks(service, workers, project, upload, tmp_path) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, project("two_voices"))
    job = client.submit(script_spec("voices", code, "train.py", nproc=2))
    done = client.wait_terminal(job["id"], timeout=120)
    assert done["status"] == "succeeded", done
    body = client.http.get(f"/jobs/{job['id']}/console").json()
    said = [(ln["rank"], ln["stream"], ln["text"]) for ln in body["lines"] if ln["text"].startswith("voice")]
    expected = [(turn, "stderr" if (turn, i) == (1, 2) else "stdout", f"voice {turn} says {i}")
                for i in range(3) for turn in (0, 1)]  # fmt: skip
    assert said == expected, body["lines"]
    assert body["ranks"] == [0, 1] and body["cursor"]
    # Search, and a follower's read from the cursor (nothing new: the job ended).
    found = client.http.get(f"/jobs/{job['id']}/console", params={"q": "SAYS 2"}).json()["lines"]
    assert [(ln["rank"], ln["text"]) for ln in found] == [(0, "voice 0 says 2"), (1, "voice 1 says 2")]
    again = client.http.get(f"/jobs/{job['id']}/console", params={"cursor": body["cursor"]}).json()
    assert again["lines"] == [] and again["cursor"] == body["cursor"]
    bad = client.http.get(f"/jobs/{job['id']}/console", params={"cursor": "0x1"})
    assert bad.status_code == 422 and "cursor" in bad.text
    # `rankzero logs JOB` prints the same merged view with rank prefixes.
    out = _cli(settings, client, tmp_path, "logs", str(job["id"]), "--grep", "voice")
    assert out.splitlines() == [f"[r{r}{' err' if s == 'stderr' else ''}] {t}" for r, s, t in expected], out
