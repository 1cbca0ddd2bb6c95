"""The job spec: the one model every part validates with (API, CLI, worker, trainer).

Importable without torch: the API validates submissions with it and exports its JSON Schema
for the dashboard's form. Every field is bounded; unknown fields are refused; NaN and inf are
refused. Cross-field rules live in `_check_consistency` so errors name the field to fix.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import sys
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from trainer import catalogue
from trainer.entrypoint import EXPANDED as ENTRYPOINT_VARIABLES
from trainer.entrypoint import Entrypoint, parse_entrypoint

# `package.module:function` names user code; anything else names a built-in.
USER_CODE_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
MAX_ARGS_DEPTH = 6
MAX_ARGS_BYTES = 16_384

# The built-in names (declared, with their default args and sizes, in trainer/catalogue.py).
BUILTIN_MODELS = tuple(catalogue.MODELS)
BUILTIN_DATA = tuple(catalogue.DATA)
BUILTIN_LOSSES = catalogue.LOSSES
MAX_ENTRYPOINT_CHARS = 4096
# An `outputs` glob: relative to the work dir, no '..', printable (issue 22; api/routes/outputs.py).
OutputGlob = Annotated[str, Field(min_length=1, max_length=300, pattern=r"^[^/\x00-\x1f\x7f\\][^\x00-\x1f\x7f\\]*$")]
# Fields only the built-in trainer reads: refused next to an `entrypoint` when the user sets them.
# (`checkpoint.keep_last` is the one checkpoint field a script job keeps: the SDK prunes by it. A script
# job also takes `resume_from`, which `rankzero.load_checkpoint()` returns, and `min_nproc`, whose
# world size and accumulation the script reads from RANKZERO_WORLD_SIZE / RANKZERO_ACCUMULATION_STEPS.)
BUILTIN_ONLY_FIELDS = (
    "model", "data", "loss", "optimizer", "scheduler", "batch_size", "accumulation_steps", "sync", "epochs",
    "max_steps", "precision", "sync_batchnorm", "grad_clip_norm", "seed", "log_every", "eval_every", "compile",
)  # fmt: skip


def is_user_code(name: str) -> bool:
    """True for `package.module:function` names, which are imported rather than looked up."""
    return bool(USER_CODE_PATTERN.match(name))


def _json_depth(value: Any, depth: int = 0) -> int:
    if isinstance(value, dict):
        return max([_json_depth(v, depth + 1) for v in value.values()], default=depth + 1)
    if isinstance(value, list):
        return max([_json_depth(v, depth + 1) for v in value], default=depth + 1)
    return depth


def _validate_args(args: dict[str, Any], kind: str, name: str | None) -> dict[str, Any]:
    """Bounded plain JSON, and for a built-in (`name`, None when the name itself was refused) only the args
    its builder takes: a typo is refused at submit, naming the nearest arg, rather than failing the run
    (a model) or being ignored (a data set)."""
    if name is not None and (unknown := catalogue.unknown_args(kind, name, args)) is not None:
        raise PydanticCustomError("value_error", "{message}", {"message": unknown})
    if _json_depth(args) > MAX_ARGS_DEPTH:
        raise ValueError(f"args nest deeper than {MAX_ARGS_DEPTH} levels; flatten them")
    try:
        encoded = json.dumps(args, allow_nan=False)
    except ValueError as exc:
        raise ValueError("args must be plain JSON without NaN or infinity") from exc
    if len(encoded) > MAX_ARGS_BYTES:
        raise ValueError(f"args take {len(encoded)} bytes as JSON; the limit is {MAX_ARGS_BYTES}")
    return args


def _check_component_name(name: str, builtins: tuple[str, ...], what: str) -> str:
    if name in builtins or is_user_code(name):
        return name
    raise ValueError(
        f"unknown {what} {name!r}: use one of {', '.join(builtins)} or user code as 'package.module:function'"
    )


class StrictModel(BaseModel):
    """Base for every spec section: unknown fields and non-finite numbers are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_default=True)


def refuse(field: str, message: str, value: Any = None) -> ValidationError:
    """A cross-field refusal that names its field (`loc`) and reads as the sentence given: a plain
    ValueError from a model validator has an empty loc and pydantic's "Value error, " before it."""
    loc = tuple(field.split("."))
    error = PydanticCustomError("value_error", "{message}", {"message": message})
    return ValidationError.from_exception_data("JobSpec", [InitErrorDetails(type=error, loc=loc, input=value)])


# Hyperparameters (`params`): named scalars, shown as their own fields and substituted into a script's entrypoint.
MAX_PARAMS = 64
PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")
PARAM_REFERENCE = re.compile(r"\$\{params\.([A-Za-z_][A-Za-z0-9_.]{0,63})\}")
ParamValue = Annotated[str, Field(max_length=200)] | bool | int | float


def param_text(value: str | bool | int | float) -> str:
    """A parameter as the word a script reads: JSON's spelling for numbers and booleans (`true`, `0.01`)."""
    return value if isinstance(value, str) else json.dumps(value)


MAX_CONSOLE_PATTERNS = 20
MAX_CONSOLE_REGEX_CHARS = 500  # SageMaker's metric_definitions limit


def compile_console_regex(regex: str) -> Any:
    """`regex` compiled with RE2 (matching time linear in the line: no catastrophic backtracking), or a
    ValueError saying what is wrong. Imported here so a spec without console patterns never needs it."""
    import re2

    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(regex, options)
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(
            f"The regex does not compile under RE2 ({detail}). RE2 matches in time linear in the line, so it "
            "has no backreferences or lookarounds: rewrite the regex without them."
        ) from None


class ConsolePattern(StrictModel):
    regex: str = Field(
        min_length=1,
        max_length=MAX_CONSOLE_REGEX_CHARS,
        description="An RE2 regular expression over rank 0's output lines, with named groups `value` and `key` "
        "(or a fixed `name`), optionally `step`: e.g. '^epoch (?P<step>\\d+) acc (?P<value>[0-9.]+)'.",
    )
    name: str | None = Field(
        None, min_length=1, max_length=100, description="The series' name when the regex has no `key` group."
    )

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            compile_console_regex(v)
        except ValueError as exc:
            raise PydanticCustomError("value_error", "{message}", {"message": str(exc)}) from None
        return v

    @model_validator(mode="after")
    def _check_groups(self) -> ConsolePattern:
        groups = compile_console_regex(self.regex).groupindex
        if "value" not in groups:
            raise refuse("regex", "The regex needs a named group `value`, e.g. (?P<value>[0-9.eE+-]+).", self.regex)
        if "key" not in groups and self.name is None:
            raise refuse("name", "The pattern needs a `name`, or a named group `key` in its regex.")
        return self


class ConsoleMetricsSpec(StrictModel):
    defaults: bool = Field(
        True,
        description="Read any `key value` fields from the script's output (`loss 0.5`, `loss: 0.5`, `loss=0.5`, "
        "`| lr 20.00 |`, dicts, tqdm and Keras bars), learning the step per job; a key becomes a series once it "
        "repeats on 3 lines (docs/your-code.md).",
    )
    patterns: list[ConsolePattern] = Field(
        default_factory=list, max_length=MAX_CONSOLE_PATTERNS, description="Patterns of your own, beside the defaults."
    )


MAX_PACKAGES = 200
MAX_REQUIREMENT_CHARS = 200
MAX_REQUIREMENTS_PATH_CHARS = 300
REQUIREMENTS_FILE_NAMES = ("requirements.txt", "pyproject.toml")


def check_requirement(text: str) -> str:
    """One requirement as pip reads it ('einops', 'timm==1.0.9', 'numpy<2; python_version>"3.9"'), stripped, or
    a ValueError saying what is wrong. Options (-r, --index-url, -e) and URLs or paths are refused: which indexes
    are used is the server's setting (RANKZERO_ENVIRONMENT_INDEX_URL), and a job's lock must name versions."""
    from packaging.requirements import InvalidRequirement, Requirement

    line = text.strip()
    if not line or len(line) > MAX_REQUIREMENT_CHARS:
        raise ValueError(f"a requirement has 1 to {MAX_REQUIREMENT_CHARS} characters: {line[:60]!r}")
    if line.startswith("-"):
        raise ValueError(
            f"{line[:60]!r}: options are not taken (the server sets the package index); give requirements only"
        )
    try:
        req = Requirement(line)
    except InvalidRequirement as exc:
        raise ValueError(f"{line[:60]!r} is not a requirement ('name', 'name==1.2', 'name>=1,<2'): {exc}") from None
    if req.url is not None:
        raise ValueError(f"{line[:60]!r}: URLs and paths are not taken; name a package and its version from the index")
    return line


class SlurmSpec(StrictModel):
    """A job's own Slurm settings, within its pool's bounds (a Slurm pool only; docs/slurm.md "Per-job settings")."""

    time_limit_min: int | None = Field(
        None, ge=1, le=525_600, description="sbatch --time for this job (minutes), at most the pool's maximum "
        "(RANKZERO_SLURM_MAX_TIME_LIMIT_MIN); default: the pool's RANKZERO_SLURM_TIME_LIMIT_MIN.",
    )  # fmt: skip
    partition: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description="sbatch --partition for this job: one the "
        "pool allows (RANKZERO_SLURM_PARTITIONS); default: the pool's RANKZERO_SLURM_PARTITION.",
    )  # fmt: skip


class EnvironmentSpec(StrictModel):
    """The job's own Python packages, built once per host into an environment layered over the service's."""

    requirements: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_REQUIREMENTS_PATH_CHARS,
        description="A requirements.txt or pyproject.toml inside the `code` bundle (a relative path), resolved "
        "once for the job into a lock every node and restart installs.",
    )
    packages: list[str] = Field(
        default_factory=list,
        max_length=MAX_PACKAGES,
        description="Requirements as pip reads them, e.g. ['einops', 'timm==1.0.9'] (no options or URLs).",
    )
    lock_from: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="Install the locked versions of this job (its id): a clone keeps exactly its source's "
        "packages (*Clone & edit* sets it). Requirements edited since are resolved preferring those versions. "
        "Leave it out to resolve the requirements afresh.",
    )

    @field_validator("requirements")
    @classmethod
    def _relative_file(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = v.replace("\\", "/").split("/")
        if v.startswith("/") or ".." in parts or any(ord(c) < 32 for c in v):
            raise ValueError("requirements is a relative path inside the code bundle, without '..'")
        if not v.endswith((".txt", "pyproject.toml")):
            raise ValueError("requirements names a requirements file (*.txt) or a pyproject.toml")
        return v

    @field_validator("packages")
    @classmethod
    def _requirements(cls, v: list[str]) -> list[str]:
        return [check_requirement(p) for p in v]

    @model_validator(mode="after")
    def _something(self) -> EnvironmentSpec:
        if self.requirements is None and not self.packages:
            raise ValueError("environment names a requirements file, packages, or both")
        return self


Args = Annotated[
    dict[str, Any], Field(default_factory=dict, description="Keyword arguments for the factory (plain JSON).")
]


class ModelSpec(StrictModel):
    name: str = Field(
        "mlp",
        max_length=200,
        description=f"Built-in model ({', '.join(BUILTIN_MODELS)}) or 'package.module:function' "
        "returning an nn.Module.",
    )
    args: Args

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        return _check_component_name(v, BUILTIN_MODELS, "model")

    @field_validator("args")
    @classmethod
    def _check_args(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return _validate_args(v, "model", info.data.get("name"))


class DataSpec(StrictModel):
    name: str = Field(
        "digits",
        max_length=200,
        description="Built-in data set or 'package.module:function' returning a Dataset or (train, val).",
    )
    args: Args
    val_fraction: float = Field(
        0.1,
        ge=0.0,
        le=0.5,
        description="Share of the data held out for validation when the data set has no split of its own.",
    )
    shuffle: bool = Field(True, description="Shuffle the training order each epoch (seeded, identical on every rank).")
    num_workers: int = Field(0, ge=0, le=32, description="DataLoader worker processes per rank.")

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        return _check_component_name(v, BUILTIN_DATA, "data set")

    @field_validator("args")
    @classmethod
    def _check_args(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return _validate_args(v, "data", info.data.get("name"))


class LossSpec(StrictModel):
    name: str = Field(
        "cross_entropy",
        max_length=200,
        description=f"{', '.join(BUILTIN_LOSSES)}, or 'package.module:function' "
        "with fn(model, batch) -> scalar tensor.",
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        return _check_component_name(v, BUILTIN_LOSSES, "loss")


class OptimizerSpec(StrictModel):
    name: Literal["sgd", "adamw", "adam"] = Field("sgd", description="Optimizer.")
    lr: float = Field(0.05, gt=0.0, le=10.0, description="Peak learning rate.")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="SGD momentum.")
    nesterov: bool = Field(False, description="SGD Nesterov momentum (needs momentum > 0).")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="Weight decay (decoupled for AdamW).")
    betas: tuple[Annotated[float, Field(ge=0.0, lt=1.0)], Annotated[float, Field(ge=0.0, lt=1.0)]] = Field(
        (0.9, 0.999), description="Adam/AdamW betas."
    )
    eps: float = Field(1e-8, gt=0.0, le=1.0, description="Adam/AdamW epsilon.")

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> OptimizerSpec:
        if self.nesterov and (self.name != "sgd" or self.momentum == 0.0):
            raise ValueError("nesterov needs optimizer.name 'sgd' and momentum > 0")
        return self


class SchedulerSpec(StrictModel):
    name: Literal["constant", "cosine", "step"] = Field("constant", description="Learning-rate schedule after warmup.")
    warmup_steps: int = Field(
        0, ge=0, le=10_000_000, description="Linear warmup from 0 to lr over this many optimizer steps."
    )
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="Cosine: final lr as a share of lr.")
    step_size: int = Field(
        1000, ge=1, le=10_000_000, description="Step: multiply lr by gamma every step_size optimizer steps."
    )
    gamma: float = Field(0.1, gt=0.0, le=1.0, description="Step: decay factor.")


class CheckpointSpec(StrictModel):
    every_steps: int | None = Field(
        None, ge=1, le=10_000_000, description="Save every N optimizer steps (None: not by steps)."
    )
    every_epochs: int | None = Field(
        1,
        ge=1,
        le=100_000,
        description="Save every N epochs (None: not by epochs); default 1, or None when every_steps is set.",
    )
    keep_last: int = Field(
        3, ge=1, le=1000, description="Keep this many most recent checkpoints; a final one is always written."
    )

    @model_validator(mode="after")
    def _steps_alone(self) -> CheckpointSpec:
        """`{every_steps: 100}` means by steps only: the epoch default would add saves that keep_last then
        counts, pruning the step checkpoints the user asked for. Both given: both apply."""
        given = self.model_fields_set
        if self.every_steps is not None and "every_epochs" not in given:
            vars(self)["every_epochs"] = None  # a default, not a value the user set (fields_set unchanged)
        return self


class JobSpec(StrictModel):
    """A training job. Global batch = batch_size × accumulation_steps × nproc × nnodes."""

    name: str = Field(
        "job", pattern=NAME_PATTERN, description="Job name: letters, digits, '.', '_' or '-', at most 100 characters."
    )
    # Sections default through model_validate({}): the type checker reads Field("x", ...) defaults as required.
    model: ModelSpec = Field(default_factory=lambda: ModelSpec.model_validate({}))
    data: DataSpec = Field(default_factory=lambda: DataSpec.model_validate({}))
    loss: LossSpec | None = Field(
        default_factory=lambda: LossSpec.model_validate({}),
        description="Loss; null when a user model computes its own loss: its forward(*batch) returns the scalar loss.",
    )
    optimizer: OptimizerSpec = Field(default_factory=lambda: OptimizerSpec.model_validate({}))
    scheduler: SchedulerSpec = Field(default_factory=lambda: SchedulerSpec.model_validate({}))
    batch_size: int = Field(32, ge=1, le=65_536, description="Samples per process per micro-batch.")
    accumulation_steps: int = Field(1, ge=1, le=1024, description="Micro-batches per optimizer step on each process.")
    nproc: int = Field(1, ge=1, le=64, description="Processes (ranks) per node; > 1 means DDP.")
    nnodes: int = Field(
        1, ge=1, le=64, description="Hosts; > 1 runs one torchrun per host (needs a runs dir the hosts share)."
    )
    min_nproc: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Elastic fit: start on fewer ranks (at least this many) when fewer are free, with "
        "accumulation_steps raised so the global batch stays the same and the weights match up to float rounding "
        "(the same sums in another order). One host only.",
    )
    pool: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        description="The pool to run in: one whose hosts registered for it (a worker's RANKZERO_QUEUE) or a Slurm "
        "pool (`rankzero slurm-agent`'s RANKZERO_SLURM_POOL); an unknown name is refused, naming the pools. "
        "Default: the server's RANKZERO_QUEUE. The stored spec names the pool it was submitted to.",
    )
    priority: int = Field(0, ge=-1000, le=1000, description="Higher runs first; equal priorities run oldest first.")
    preemptible: bool = Field(
        False, description="May be stopped (checkpointed, requeued, nothing lost) to start a higher-priority job."
    )
    memory_limit_mb: int | None = Field(
        None,
        ge=256,
        le=16 * 1024 * 1024,
        description="Stop the job when its processes together use more resident memory (MiB) than this.",
    )
    compile: bool = Field(False, description="torch.compile the model (pays off on long jobs; its cache is kept).")
    sync: Literal["ddp", "manual", "dataparallel"] = Field(
        "ddp",
        description="ddp: native DistributedDataParallel; manual: hand-written all-reduce once per optimizer step; "
        "dataparallel: one process driving every visible GPU with nn.DataParallel (needs nproc 1 and ≥ 2 GPUs).",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: cuda:LOCAL_RANK when a GPU is visible, else CPU."
    )
    epochs: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Epochs to train (one of epochs / max_steps, or both: the first reached ends the run).",
    )
    max_steps: int | None = Field(None, ge=1, le=1_000_000_000, description="Optimizer steps to train.")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="fp32; bf16 autocast; fp16 autocast with GradScaler (CUDA only)."
    )
    sync_batchnorm: bool = Field(
        False, description="Convert BatchNorm to SyncBatchNorm (DDP on CUDA only: PyTorch has no CPU kernel for it)."
    )
    grad_clip_norm: float | None = Field(
        None, gt=0.0, le=1e6, description="Clip the global gradient norm (after unscaling)."
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed for weights, shuffling and augmentation.")
    log_every: int = Field(
        10, ge=1, le=1_000_000, description="Reduce train/loss to rank 0 and log every N optimizer steps."
    )
    eval_every: int | None = Field(
        None, ge=1, le=10_000_000, description="Validate every N optimizer steps (None: at the end of each epoch)."
    )
    checkpoint: CheckpointSpec = Field(default_factory=lambda: CheckpointSpec.model_validate({}))
    resume_from: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="Checkpoint file to resume from (the service only allows paths inside its runs dir); "
        "a script job gets it from rankzero.load_checkpoint() until it saves its own.",
    )
    max_restarts: int = Field(
        0, ge=0, le=100, description="Restart a failed attempt from its latest checkpoint at most this many times."
    )
    stall_timeout_s: float | None = Field(
        None, ge=10.0, le=7 * 24 * 3600.0, description="Fail (or restart) the job when no event arrives for this long."
    )
    # Quotas (issue 19 item 6; worker/quota.py): the worker stops the ranks (they checkpoint) and fails the job.
    max_runtime_s: int | None = Field(
        None,
        ge=1,
        le=365 * 24 * 3600,
        description="Stop the job (its ranks save a checkpoint) and fail it once it has been running this many "
        "seconds since its first start (all attempts).",
    )
    disk_limit_mb: int | None = Field(
        None,
        ge=1,
        le=1 << 30,
        description="Stop the job (its ranks save a checkpoint) and fail it when its run dir grows past this many "
        "MiB (default: the server's RANKZERO_JOB_DISK_LIMIT_MB).",
    )
    code: str | None = Field(
        None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="An uploaded code bundle ('sha256:<hex>', from POST /api/code or `rankzero submit --code DIR`); "
        "it goes first on the ranks' PYTHONPATH.",
    )
    entrypoint: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_ENTRYPOINT_CHARS,
        description="Run your own script instead of the built-in trainer: 'train.py --epochs 3' or '-m pkg.main "
        "--lr 0.1' (a path or module inside the `code` bundle, then its arguments; parsed like a shell, no shell "
        "runs). It runs as `torchrun --nproc-per-node N <entrypoint>` in the bundle; needs `code`.",
    )

    params: dict[str, ParamValue] = Field(
        default_factory=dict,
        max_length=MAX_PARAMS,
        description="Named hyperparameters (sweeps): shown as their own fields; `${params.NAME}` in `entrypoint` is "
        "replaced by the value at submit, and a script reads them all with `rankzero.params()`.",
    )

    environment: EnvironmentSpec | None = Field(
        None,
        description="Python packages the job imports beyond the service's: a requirements file in the bundle and/or "
        "a list; built once per host into a cached environment (docs/your-code.md 'Bring your own packages').",
    )

    slurm: SlurmSpec | None = Field(
        None, description="Slurm settings of this job within its pool's bounds (time limit, partition); a job of a "
        "Slurm pool only (docs/slurm.md).",
    )  # fmt: skip
    console_metrics: ConsoleMetricsSpec | None = Field(
        None,
        description="A script job's metrics and progress from its console (rank 0's stdout/stderr): the default "
        "formats, patterns of your own, or defaults false to read nothing. The SDK and TensorBoard win for a name.",
    )
    outputs: list[OutputGlob] = Field(
        default_factory=list,
        max_length=50,
        description="Which files under the job's work dir are its outputs (listed with size and sha256, "
        "downloadable): globs relative to the work dir, `*` matching across folders ('plots/*.png', '*.onnx'); "
        "empty: every file the job writes there.",
    )

    @field_validator("outputs")
    @classmethod
    def _outputs_inside(cls, v: list[str]) -> list[str]:
        for glob in v:
            if ".." in glob.split("/"):
                raise ValueError(f"outputs glob {glob!r} leaves the work dir ('..'): give a path inside it")
        return v

    @field_validator("resume_from")
    @classmethod
    def _plain_path(cls, v: str | None) -> str | None:
        if v is not None and ("\x00" in v or any(ord(c) < 32 for c in v)):
            raise ValueError("resume_from must not contain NUL or control characters")
        return v

    @field_validator("entrypoint")
    @classmethod
    def _check_entrypoint(cls, v: str | None) -> str | None:
        if v is not None:
            # `${params.NAME}` is replaced at validation (`_substitute_params`): checked here as a plain word.
            parse_entrypoint(PARAM_REFERENCE.sub("0", v))  # raises ValueError naming what is wrong
        return v

    @model_validator(mode="after")
    def _check_consistency(self) -> JobSpec:
        if self.environment is not None and self.environment.requirements is not None and self.code is None:
            raise refuse(
                "environment.requirements",
                "environment.requirements names a file in the code bundle: submit with --code DIR (or list "
                "environment.packages instead).",
            )
        self._substitute_params()
        if self.entrypoint is not None:
            return self._check_script_job()
        if self.console_metrics is not None:
            raise refuse(
                "console_metrics",
                "console_metrics applies only to an entrypoint script (the built-in trainer reports its own "
                "metrics): remove it.",
            )
        if self.epochs is None and self.max_steps is None:
            raise ValueError("set epochs or max_steps (or both) so the run knows when to stop")
        if self.sync == "dataparallel" and (self.nproc != 1 or self.nnodes != 1):
            raise ValueError("sync 'dataparallel' is one process driving several GPUs: set nproc 1 and nnodes 1")
        if self.sync_batchnorm and self.world_size == 1:
            raise ValueError("sync_batchnorm needs DDP: set nproc > 1 (or turn sync_batchnorm off)")
        if self.sync_batchnorm and self.sync != "ddp":
            raise ValueError("sync_batchnorm needs sync 'ddp'")
        if self.precision == "fp16" and self.device == "cpu":
            raise ValueError("precision fp16 needs CUDA (GradScaler); use bf16 or fp32 on CPU")
        if self.loss is None and not is_user_code(self.model.name):
            raise ValueError("loss null is only for user models that compute their own loss; set loss.name")
        self._check_elastic()
        return self

    @field_validator("params")
    @classmethod
    def _check_params(cls, v: dict[str, ParamValue]) -> dict[str, ParamValue]:
        bad = next((name for name in v if not PARAM_NAME.match(name)), None)
        if bad is not None:
            raise ValueError(
                f"parameter name {bad[:80]!r} is not allowed: letters, digits, '_' and '.', starting with a letter "
                "or '_', at most 64 characters"
            )
        return v

    def _substitute_params(self) -> None:
        """`${params.NAME}` in the entrypoint becomes the value (one shell word, quoted as needed); an unknown
        name is refused, naming the field. Done once, at validation: the stored spec holds the substituted
        line, so a stored spec validates again unchanged and the worker runs exactly what was stored."""
        if self.entrypoint is None or "${" not in self.entrypoint:
            return
        unknown = [m.group(1) for m in PARAM_REFERENCE.finditer(self.entrypoint) if m.group(1) not in self.params]
        if unknown:
            known = ", ".join(sorted(self.params)) or "none"
            raise refuse(
                "entrypoint",
                f"entrypoint names ${{params.{unknown[0]}}} but params has no {unknown[0]!r} (params: {known}): "
                "add it to params or fix the name.",
                self.entrypoint,
            )
        line = PARAM_REFERENCE.sub(lambda m: shlex.quote(param_text(self.params[m.group(1)])), self.entrypoint)
        # ${RANKZERO_DATASETS_DIR} and the like stay: the worker expands them at launch (trainer/entrypoint.py).
        if "${" in functools.reduce(lambda text, name: text.replace(f"${{{name}}}", ""), ENTRYPOINT_VARIABLES, line):
            raise refuse(
                "entrypoint",
                "entrypoint has a '${' that is not a ${params.NAME} reference nor one of "
                + ", ".join(f"${{{n}}}" for n in ENTRYPOINT_VARIABLES)
                + ": fix or remove it.",
                line,
            )
        try:
            parse_entrypoint(line)
        except ValueError as exc:
            raise refuse("entrypoint", f"with params substituted: {exc}", line) from None
        vars(self)["entrypoint"] = line

    def _check_elastic(self) -> None:
        if self.min_nproc is None:
            return
        if self.min_nproc > self.nproc:
            raise ValueError(f"min_nproc ({self.min_nproc}) must not exceed nproc ({self.nproc})")
        if self.nnodes != 1:
            raise ValueError("min_nproc (elastic fit) works on one host: set nnodes 1, or leave min_nproc out")
        if self.sync == "dataparallel":
            raise ValueError("min_nproc does not apply to sync 'dataparallel' (one process)")

    def elastic_sizes(self) -> list[int]:
        """Rank counts this job may run on, largest first: nproc, then (elastic) every w ≥ min_nproc that keeps
        the global batch exact (w divides nproc × accumulation_steps)."""
        if self.min_nproc is None:
            return [self.nproc]
        total = self.nproc * self.accumulation_steps
        return [w for w in range(self.nproc, self.min_nproc - 1, -1) if total % w == 0]

    def _check_script_job(self) -> JobSpec:
        if self.code is None:
            raise refuse(
                "code", "entrypoint needs code: the bundle holding the script (`rankzero submit job.yaml --code DIR`)."
            )
        refused = self.builtin_fields_set()
        if refused:
            one = len(refused) == 1
            raise refuse(
                refused[0],
                f"{', '.join(refused)} only {'applies' if one else 'apply'} to the built-in trainer, not to an "
                f"entrypoint script: remove {'it' if one else 'them'} (your script reads its own arguments: put "
                "them in entrypoint).",
            )
        return self

    def builtin_fields_set(self) -> list[str]:
        """The built-in trainer's fields the user set (in the order of the model), e.g. ['model', 'epochs']."""
        named = [name for name in BUILTIN_ONLY_FIELDS if name in self.model_fields_set]
        if "checkpoint" in self.model_fields_set:
            given = self.checkpoint.model_fields_set
            named += [f"checkpoint.{f}" for f in ("every_steps", "every_epochs") if f in given]
        return named

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A script job's dump leaves out the built-in trainer's fields (so it validates again as it is)."""
        data = handler(self)
        if self.entrypoint is None or not isinstance(data, dict):
            return data
        for name in BUILTIN_ONLY_FIELDS:
            data.pop(name, None)
        if isinstance(data.get("checkpoint"), dict):
            data["checkpoint"] = {"keep_last": data["checkpoint"].get("keep_last")}
        return data

    @property
    def is_script(self) -> bool:
        """True for a job that runs the user's own entrypoint instead of the built-in trainer."""
        return self.entrypoint is not None

    def parsed_entrypoint(self) -> Entrypoint | None:
        return parse_entrypoint(self.entrypoint) if self.entrypoint is not None else None

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.accumulation_steps * self.world_size

    @property
    def strategy(self) -> str:
        """Human label, e.g. 'DDP 4 × acc 2', 'manual 2', 'single', 'acc 4', 'script × 2'."""
        if self.entrypoint is not None:
            return "script" if self.world_size == 1 else f"script × {self.world_size}"
        parts = []
        if self.sync == "dataparallel":
            parts.append("DataParallel")
        elif self.world_size > 1:
            parts.append(f"{'DDP' if self.sync == 'ddp' else 'manual'} {self.world_size}")
        if self.accumulation_steps > 1:
            parts.append(f"acc {self.accumulation_steps}")
        return " × ".join(parts) or "single"

    def user_code_names(self) -> list[str]:
        """Every `module:function` the spec would import (for the server's allow-list)."""
        names = [self.model.name, self.data.name] + ([self.loss.name] if self.loss else [])
        return [n for n in names if is_user_code(n)]


def json_schema() -> dict[str, Any]:
    return JobSpec.model_json_schema()


if __name__ == "__main__":  # python -m trainer.spec > job-spec.schema.json
    json.dump(json_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
