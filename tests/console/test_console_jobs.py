"""Real script jobs that only print (tests/console/projects/printer) under torchrun and a real Celery worker:
each end with the right step and series, from their console alone; the SDK wins a name over the console."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.scripts.conftest import script_spec

PRINTER = Path(__file__).parent / "projects" / "printer"


def _series(client: Any, job_id: int) -> dict[str, list[tuple[int, float]]]:
    body = client.http.get(f"/jobs/{job_id}/metrics").json()
    return {
        s["name"]: [(p["step"], p["value"]) for p in s["points"]]
        for s in body["series"]
        if not s["name"].startswith("sys/")
    }


def _run(client: Any, code: str, mode: str, **kw: Any) -> dict[str, Any]:
    return client.submit(script_spec(f"console-{mode}", code, f"train.py {mode}", **kw))


def test_printing_scripts_end_with_their_step_and_series(service, workers, upload, tmp_path) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, shutil.copytree(PRINTER, tmp_path / "printer"))
    jobs = {
        "nanogpt": _run(client, code, "nanogpt", nproc=2),
        "tqdm_hf": _run(client, code, "tqdm_hf"),
        "lightning": _run(client, code, "lightning"),
        "keras_guild": _run(client, code, "keras_guild"),
        "custom": _run(
            client,
            code,
            "custom",
            console_metrics={
                "defaults": False,
                "patterns": [{"regex": r"^\[(?P<step>\d+)\] (?P<key>\w+)=(?P<value>[0-9.]+)"}],
            },
        ),
        "sdk": _run(client, code, "sdk"),
    }
    done = {mode: client.wait_terminal(job["id"], timeout=240) for mode, job in jobs.items()}
    assert all(d["status"] == "succeeded" for d in done.values()), {
        k: (d["status"], d.get("error")) for k, d in done.items()
    }
    series = {mode: _series(client, job["id"]) for mode, job in jobs.items()}

    nano = series["nanogpt"]
    assert set(nano) == {"loss", "time", "mfu", "train loss", "val loss"}, set(nano)
    assert [s for s, _ in nano["loss"]] == list(range(31)) and nano["loss"][-1] == (30, 2.5)
    assert nano["time"][0] == (0, 40.12) and nano["mfu"][0] == (0, -100.0)
    assert nano["val loss"] == [(0, 4.1), (10, 3.1), (20, 2.1), (30, 1.1)]
    assert done["nanogpt"]["step"] == 30 and done["nanogpt"]["latest_loss"] == 2.5

    hf = series["tqdm_hf"]
    assert set(hf) == {"loss", "learning_rate", "epoch"}, set(hf)
    # A dict line has no step: it takes the bar's counter, read from the other stream (stderr), so only its
    # order is exact: three points each, steps increasing within the bar's 1..12.
    assert [v for _, v in hf["loss"]] == [1.6, 1.2, 0.8] and [v for _, v in hf["epoch"]] == [0.33, 0.67, 1.0]
    steps = [s for s, _ in hf["learning_rate"]]
    assert steps == sorted(set(steps)) and steps[0] >= 0 and steps[-1] <= 14, steps
    assert (done["tqdm_hf"]["step"], done["tqdm_hf"]["total_steps"]) == (12, 12)

    lt = series["lightning"]
    assert lt == {"loss": [(1, 1.0), (2, 0.5), (3, 0.333), (4, 0.25), (5, 2.0), (6, 1.5), (7, 1.333), (8, 1.25)]}, lt
    assert done["lightning"]["step"] == 8 and done["lightning"]["latest_loss"] == 1.25

    kg = series["keras_guild"]  # epoch × 10 batches + the batch: steps 10, 20, 30; `val_bleu` once is no series
    assert kg == {"loss": [(10, 1.0), (20, 0.5), (30, 0.3333)], "accuracy": [(10, 0.6), (20, 0.7), (30, 0.8)]}, kg
    assert (done["keras_guild"]["step"], done["keras_guild"]["total_steps"]) == (30, 30)

    assert series["custom"] == {"score": [(s, s * 1.5) for s in range(1, 6)]}
    assert done["custom"]["step"] == 5

    sources = {s["name"]: s["source"] for s in client.http.get(f"/jobs/{jobs['sdk']['id']}/metrics").json()["series"]}
    assert sources["time"] == "console" and sources["loss"] is None  # the chart says where each came from
    sdk = series["sdk"]
    assert sdk["loss"] == [(s, float(s)) for s in range(1, 9)], sdk["loss"]
    assert sdk["time"] == [(s, 3.0) for s in range(1, 9)]


def test_a_fast_printer_keeps_every_point_and_a_pattern_added_after_the_end_draws_its_curve(
    service, workers, upload, tmp_path
) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, shutil.copytree(PRINTER, tmp_path / "printer"))
    flood, bare, slow = _run(client, code, "flood"), _run(client, code, "bare"), _run(client, code, "slow_bare")
    # A pattern added while a job runs: its worker reads the console so far again with it, then every new line.
    deadline = time.monotonic() + 120
    while (client.http.get(f"/jobs/{slow['id']}/metrics").json().get("console") or {}).get("lines", 0) < 8:
        assert time.monotonic() < deadline, "the running job's console summary never showed 8 lines"
        time.sleep(0.5)
    pattern = {"regex": r"^(?P<step>\d+)\s+(?P<value>[-+0-9.eE]+)\s+done$", "name": "metric"}
    r = client.http.post(f"/jobs/{slow['id']}/console-patterns", json=pattern)
    assert r.status_code == 200 and r.json() == {"patterns": 1, "applied": "running job", "points": 0}, r.text
    done = {
        "flood": client.wait_terminal(flood["id"], timeout=280),
        "bare": client.wait_terminal(bare["id"], timeout=200),
    }
    assert all(d["status"] == "succeeded" for d in done.values()), {
        k: (d["status"], d.get("error")) for k, d in done.items()
    }

    slow_done = client.wait_terminal(slow["id"], timeout=200)
    assert slow_done["status"] == "succeeded", slow_done.get("error")
    assert _series(client, slow["id"]) == {"metric": [(i, round(1 / (i + 1), 4)) for i in range(40)]}
    summary = client.http.get(f"/jobs/{slow['id']}/metrics").json()["console"]
    assert summary["series"] == ["metric"] and summary["suggestion"] is None

    # 50 MB printed in about a second, then the end: every line read, every point kept.
    body = client.http.get(f"/jobs/{flood['id']}/metrics", params={"name": "loss", "max_points": 100_000}).json()
    loss = body["series"][0]
    assert loss["total_points"] == 50_000 and not loss["downsampled"]
    assert [p["step"] for p in loss["points"]] == list(range(50_000))
    assert loss["points"][-1]["value"] == pytest.approx(1.49999)
    assert done["flood"]["step"] == 49_999
    summary = body["console"]  # the lines: the flood's and noise()'s four
    assert summary["series"] == ["loss"] and summary["lines"] == 50_004 and summary["capped_streams"] == []

    # Numbers with no names: nothing recognised, a pattern suggested; added to the finished job, it is read
    # from the stored console at once.
    summary = client.http.get(f"/jobs/{bare['id']}/metrics").json()["console"]
    assert summary["series"] == [] and summary["lines"] == 25, summary  # 21 and noise()'s four
    suggestion = summary["suggestion"]
    assert suggestion["line"] == "0 1.0000 done" and suggestion["name"] == "metric"
    r = client.http.post(f"/jobs/{bare['id']}/console-patterns", json={"regex": suggestion["regex"], "name": "metric"})
    assert r.status_code == 200, r.text
    assert r.json() == {"patterns": 1, "applied": "stored console", "points": 20}
    assert _series(client, bare["id"]) == {"metric": [(i, round(1 / (i + 1), 4)) for i in range(20)]}
    after = client.http.get(f"/jobs/{bare['id']}/metrics").json()
    assert after["series"][0]["source"] == "console" and after["console"]["series"] == ["metric"]
    assert after["console"]["example"] == "0 1.0000 done" and after["console"]["suggestion"] is None
    job = client.http.get(f"/jobs/{bare['id']}").json()
    assert job["spec"]["console_metrics"]["patterns"] == [{"regex": suggestion["regex"], "name": "metric"}]
    again = client.http.post(
        f"/jobs/{bare['id']}/console-patterns", json={"regex": suggestion["regex"], "name": "metric"}
    )
    assert again.json()["points"] == 0  # the same steps again: nothing written twice
    refused = client.http.post(f"/jobs/{bare['id']}/console-patterns", json={"regex": "(a)\\1", "name": "x"})
    assert refused.status_code == 422 and "RE2" in refused.text


def test_a_gitignored_data_file_put_back_by_rankzeroignore_is_read_by_the_job(
    service, workers, upload, tmp_path
) -> None:
    from core.bundles.excluded import excluded

    project = shutil.copytree(Path(__file__).parent / "projects" / "data_reader", tmp_path / "data_reader")
    (project / "data").mkdir()
    (project / "data" / "train.bin").write_bytes(b"\x01" * 4096)
    assert excluded(project) == []  # `!*.bin` in .rankzeroignore wins over .gitignore's `*.bin`
    settings, client = service()
    workers.start(settings)
    code = upload(client, project)
    job = client.submit(script_spec("data-reader", code, "train.py data/train.bin"))
    # The same project without its .rankzeroignore, uploaded as `rankzero submit --code` does (then the record of
    # what it left out): the job page lists the file, and the failure's headline names it first.
    left = shutil.copytree(project, tmp_path / "left_out")
    (left / ".rankzeroignore").unlink()
    left_code = _upload_with_record(client, left, tmp_path)
    lost = client.submit(script_spec("data-reader-left-out", left_code, "train.py data/train.bin"))
    listed = client.http.get(f"/code/{left_code.removeprefix('sha256:')}/files").json()["left_out"]
    assert [(e["path"], e["ignore_file"], e["pattern"]) for e in listed] == [("data/train.bin", ".gitignore", "*.bin")]
    done = client.wait_terminal(job["id"], timeout=180)
    assert done["status"] == "succeeded", done
    failed = client.wait_terminal(lost["id"], timeout=180)
    assert failed["status"] == "failed", failed
    assert failed["error"].startswith("data/train.bin was left out of the upload by .gitignore line "), failed["error"]
    assert str(settings.data_dir) not in failed["error"]  # no worker path in what the user reads


def _upload_with_record(client: Any, folder: Path, tmp: Path) -> str:
    from core import bundles
    from core.bundles.excluded import excluded, to_json

    packed = bundles.pack(folder, tmp / "left.tar.gz")
    r = client.http.post("/code", content=packed.archive.read_bytes(), headers={"Content-Type": "application/gzip"})
    assert r.status_code in (200, 201), r.text
    record = to_json(excluded(folder))  # what cli/code.py `_send_record` sends
    r = client.http.put(f"/code/{packed.sha256}/left-out", content=record, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json() == {"entries": 1}, r.text
    refused = client.http.put(f"/code/{packed.sha256}/left-out", content=b"[1]")
    assert refused.status_code == 422 and "entries" in refused.json()["detail"]
    kept = client.http.get(f"/code/{packed.sha256}/left-out").json()  # what the job page shows, on its own
    assert [(e["path"], e["ignore_file"]) for e in kept] == [("data/train.bin", ".gitignore")], kept
    assert client.http.get(f"/code/{'0' * 64}/left-out").status_code == 404
    return f"sha256:{packed.sha256}"
