"""The spec of a job that resumes another job's checkpoint (dashboard "Resume from here", `rankzero resume`).

`max_steps` counts steps from the start of training, so a copy of a finished job's spec would stop
at once: a resume of a job that reached its end trains as long again past the checkpoint (or
`max_steps` as given); a resume of a job that stopped early goes on to the original end.
"""

from __future__ import annotations

from typing import Any

from trainer.checkpoint_files import checkpoint_step


def derived_name(name: str, suffix: str) -> str:
    return f"{name[: 99 - len(suffix)]}-{suffix}"


def _start_step(spec: dict[str, Any]) -> int:
    """The step the job itself started from: its own resume_from checkpoint's, else 0."""
    return checkpoint_step(str(spec.get("resume_from") or "")) or 0


def resume_spec(
    spec: dict[str, Any],
    *,
    total_steps: int | None,
    checkpoint_step: int,
    resume_from: str,
    max_steps: int | None = None,
) -> tuple[dict[str, Any], str]:
    """(the new spec, a sentence saying how long it trains). `total_steps`: the job's own end, when known.

    A script job (spec `entrypoint`) decides its own length: its new spec only adds `resume_from`, which
    `rankzero.load_checkpoint()` returns to it (`max_steps` does not apply to a script)."""
    new = dict(spec)
    new["resume_from"] = resume_from
    new["name"] = derived_name(str(spec.get("name") or "job"), "resume")
    if spec.get("entrypoint"):
        return new, (
            f"its script gets the checkpoint at step {checkpoint_step:,} from rankzero.load_checkpoint() "
            "and decides how long it trains"
        )
    end = spec.get("max_steps") or total_steps
    if max_steps is not None:
        new["max_steps"] = max_steps
        new["epochs"] = None
        note = f"trains to step {max_steps:,}"
    elif end is None:
        return new, "trains for the spec's epochs (its length in steps is unknown: set max_steps to choose)"
    elif checkpoint_step < end:
        new["max_steps"] = end
        note = f"goes on to the original end, step {end:,}"
    else:
        length = max(1, end - _start_step(spec))
        new["max_steps"] = checkpoint_step + length
        new["epochs"] = None  # max_steps decides: the epochs it already trained would end it at once
        note = f"trains {length:,} more steps, to step {checkpoint_step + length:,} (as long as the original run)"
    if new["max_steps"] <= checkpoint_step:
        note += f"; warning: that is not beyond the checkpoint's step {checkpoint_step:,}, so it would train 0 steps"
    return new, note


# A script decides its own length (its arguments): a sweep of one is trained longer only through a param that
# sets its length in steps, one of these names, which its entrypoint references or `rankzero.params()` reads.
LENGTH_PARAMS = ("steps", "max_steps", "total_steps", "num_steps", "train_steps")
NO_LENGTH_PARAM = (
    "a script decides its own length, so training it longer needs its length in steps as a param: name it "
    "`steps` in the sweep's job (params: {steps: 100}, entrypoint `train.py --steps ${params.steps}`), or resume "
    "the best trial with `rankzero resume JOB` and a longer entrypoint"
)


def script_length_param(template: dict[str, Any]) -> str | None:
    """The param that sets a script sweep's length in steps (`template`: the sweep's job, its entrypoint not yet
    substituted): a LENGTH_PARAMS name its entrypoint references, or an int in its params; None: it has none."""
    entry = str(template.get("entrypoint") or "")
    params = template.get("params") if isinstance(template.get("params"), dict) else {}
    for name in LENGTH_PARAMS:
        if f"${{params.{name}}}" in entry or isinstance((params or {}).get(name), int):
            return name
    return None


def extend_refusal(template: dict[str, Any]) -> str | None:
    """Why a sweep's best trial cannot be trained longer (None: it can): a script with no length param."""
    if not template.get("entrypoint") or script_length_param(template) is not None:
        return None
    return NO_LENGTH_PARAM


def longer_script_spec(
    template: dict[str, Any], spec: dict[str, Any], *, checkpoint_step: int, resume_from: str, steps: int | None
) -> tuple[dict[str, Any], str]:
    """A script trial resumed with its length param raised (default: twice its own), the entrypoint the sweep's
    template again so the new value is substituted into it; (the spec, a sentence saying what it does).
    ValueError when it would train no step past the checkpoint."""
    name = script_length_param(template)
    if name is None:
        raise ValueError(NO_LENGTH_PARAM)
    params = dict(spec.get("params") or {})
    own = params.get(name)
    target = steps if steps is not None else 2 * (own if isinstance(own, int) and own > 0 else checkpoint_step)
    if target <= checkpoint_step:
        raise ValueError(
            f"{name} {target:,} is not beyond the checkpoint's step {checkpoint_step:,}: the script would train "
            f"0 steps; set max_steps above {checkpoint_step:,}"
        )
    new, _ = resume_spec(spec, total_steps=None, checkpoint_step=checkpoint_step, resume_from=resume_from)
    new["params"] = {**params, name: target}
    new["entrypoint"] = template["entrypoint"]
    return new, f"its param {name} raised to {target:,}: the script goes on from step {checkpoint_step:,} to {target:,}"
