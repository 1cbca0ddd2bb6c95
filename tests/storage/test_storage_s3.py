"""The S3 back-end against a real S3-protocol server (moto's, started by the fixture): the store's own
operations, and the API configured with `s3://bucket/prefix` receiving a worker's uploads, verifying
them by sha256, applying keep_last in the bucket, and serving them as checkpoints and outputs."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

from core.artifacts.s3 import S3Store
from tests.storage.conftest import BUCKET, S3_KEYS, s3_client
from tests.support.jobs import fake_spec


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_s3_store_round_trip(s3_server: str, tmp_path: Path) -> None:
    store = S3Store(f"s3://{BUCKET}/team/a", s3_client(s3_server))
    source = tmp_path / "blob"
    data = bytes(range(256)) * 5000
    source.write_bytes(data)
    store.put("job_3/work/out/blob.bin", source, _sha(data))
    entry = store.stat("job_3/work/out/blob.bin")
    assert entry is not None and entry.size == len(data) and entry.sha256 == _sha(data)
    assert b"".join(store.read("job_3/work/out/blob.bin")) == data
    assert b"".join(store.read("job_3/work/out/blob.bin", start=10)) == data[10:]
    assert [e.key for e in store.list("job_3/", 10)] == ["job_3/work/out/blob.bin"]
    raw = s3_client(s3_server).list_objects_v2(Bucket=BUCKET)["Contents"]
    assert [o["Key"] for o in raw] == ["team/a/job_3/work/out/blob.bin"]  # under the prefix
    store.delete("job_3/work/out/blob.bin")
    assert store.stat("job_3/work/out/blob.bin") is None and store.list("job_3/", 10) == []


def _upload(client: Any, job_id: int, path: str, data: bytes, sha: str | None = None) -> Any:
    return client.http.post(f"/artifacts/jobs/{job_id}/files/{path}", content=data,
                            headers={"X-Content-SHA256": sha or _sha(data)})  # fmt: skip


def test_the_api_keeps_uploads_in_s3_verified_and_pruned(service, s3_server: str) -> None:
    settings, client = service(artifact_store=f"s3://{BUCKET}/rz", s3_endpoint_url=s3_server, **S3_KEYS)
    assert client.http.get("/artifacts/storage").json() == {"kind": "s3", "where": f"s3://{BUCKET}/rz"}
    job = client.submit(fake_spec("s3", checkpoint={"every_steps": 5, "every_epochs": None, "keep_last": 2}))
    job_id = job["id"]
    # A torn upload (bytes that do not match the sha256 sent) is refused and nothing is kept.
    bad = _upload(client, job_id, "checkpoints/step_00000001.pt", b"torn", sha=_sha(b"whole"))
    assert bad.status_code == 400 and "sha256" in bad.json()["detail"]
    for step in (5, 10, 15, 20):
        r = _upload(client, job_id, f"checkpoints/step_{step:08d}.pt", f"weights at {step}".encode())
        assert r.status_code == 200, r.text
    keys = [o["Key"] for o in s3_client(s3_server).list_objects_v2(Bucket=BUCKET, Prefix="rz/")["Contents"]]
    assert keys == [f"rz/job_{job_id}/checkpoints/step_00000015.pt", f"rz/job_{job_id}/checkpoints/step_00000020.pt"]
    assert not (settings.resolved_runs_dir / f"job_{job_id}" / "checkpoints").exists()  # nothing on the API's disk
    fetched = client.http.get(f"/artifacts/jobs/{job_id}/files/checkpoints/step_00000020.pt")
    assert fetched.content == b"weights at 20" and fetched.headers["X-Content-SHA256"] == _sha(b"weights at 20")
    # A path that leaves the run dir is refused before anything is read.
    assert _upload(client, job_id, "work/..%2F..%2Fx", b"x").status_code in (404, 422)

    outputs = {"plots/loss.txt": b"1 0.5\n2 0.25\n", "model/w.bin": bytes(range(200)) * 40, "notes.md": b"# hi\n"}
    for path, data in outputs.items():
        assert _upload(client, job_id, f"work/{path}", data).status_code == 200
    listing = client.http.get(f"/jobs/{job_id}/outputs").json()
    assert {f["path"]: (f["bytes"], f["sha256"]) for f in listing["files"]} == {
        p: (len(d), _sha(d)) for p, d in outputs.items()
    }
    one = client.http.get(f"/jobs/{job_id}/outputs/file", params={"path": "model/w.bin"})
    assert _sha(one.content) == _sha(outputs["model/w.bin"]) == one.headers["X-Content-SHA256"]
    archive = client.http.get(f"/jobs/{job_id}/outputs/archive", params={"folder": "plots"})
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert members == {"plots/loss.txt": outputs["plots/loss.txt"]}
