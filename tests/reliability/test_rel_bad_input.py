"""Bad input the API tests (tests/api/test_api_bad_input.py) leave to the running service: a malicious
pickle given as the checkpoint to resume from. Its payload would create a canary file; the trainer's
torch.load(weights_only=True) must refuse it, so the canary never appears."""

from __future__ import annotations

from pathlib import Path

from tests.support.jobs import slow_spec


class _Payload:
    """Unpickling this calls open(canary, "w"), creating the file: code execution, as any gadget would get."""

    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (open, (str(self.canary), "w"))


def test_malicious_pickle_as_resume_from_is_refused(service, workers, tmp_path: Path) -> None:
    import torch

    settings, client = service()
    canary = tmp_path / "canary"
    evil = settings.resolved_runs_dir / "uploads" / "checkpoints" / "step_00000010.pt"
    evil.parent.mkdir(parents=True)
    # A checkpoint-shaped dict in torch's own format, with the payload where the weights would be.
    torch.save({"model": _Payload(canary), "step": 10}, evil)
    assert not canary.exists()
    # The payload is real: an unsafe load of the same kind of file does run it.
    proof = tmp_path / "proof.pt"
    torch.save({"model": _Payload(tmp_path / "proof-canary"), "step": 10}, proof)
    torch.load(proof, weights_only=False)
    assert (tmp_path / "proof-canary").exists()

    workers.start(settings)
    job = client.submit(slow_spec("evil-resume", step_s=0.0, nproc=1, max_steps=20, resume_from=str(evil)))
    done = client.wait_terminal(job["id"], 120)
    assert done["status"] == "failed", done
    assert "weights_only" in done["error"] or "Unsupported global" in done["error"], done["error"]
    assert not canary.exists(), "the pickle's payload ran"
    assert done["step"] == 0 and not client.http.get(f"/jobs/{job['id']}/checkpoints").json()
