"""The built-in models, data sets and losses, declared once (torch-free).

Read by the spec (which names are built-in: trainer/spec.py), the builders (their default args:
trainer/models.py, trainer/data/datasets.py, the folder arg confined in trainer/data/confine.py) and
the submit limits (each entry's size formula: api/submit_policy.py), so a new built-in or a changed
default is one edit here. The size formulas count what the builder would allocate (parameters of a
model, numbers of a generated data set) from the args alone, so the API can refuse a job that would
not fit without building anything.

To add a built-in: an entry here (name, default args, size formula when it can be sized), then its
builder under the same name (tests/trainer/test_catalogue.py checks both sides agree).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

Args = Mapping[str, Any]


class ArgError(ValueError):
    """A built-in's arg that cannot be sized; `key` names it, the message says what it must be."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def whole(args: Args, key: str, where: str) -> int:
    """`args[key]` as a whole number ≥ 0, else ArgError naming `<where>.<key>`."""
    value = args.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArgError(key, f"{where}.{key} must be a whole number ≥ 0 (got {value!r})")
    return value


def whole_list(args: Args, key: str, where: str) -> list[int]:
    """`args[key]` as a non-empty list of whole numbers (a single number is a list of one)."""
    value = args.get(key)
    items = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(items, list) or not items:
        raise ArgError(key, f"{where}.{key} must be a whole number or a list of them")
    return [whole({key: v}, key, where) for v in items]


def _frozen(values: dict[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(values)


@dataclass(frozen=True)
class Builtin:
    """One built-in model or data set.

    `defaults`: the args its builder uses when the spec leaves them out (args whose default is not a
    constant, e.g. a seed that follows the job's, are left out and named in the builder).
    `size`: from args merged with the defaults, a model's parameter count or a generated data set's
    numbers (None: not sized, e.g. files on disk); raises ArgError for an arg it cannot read.
    `path_arg`: the arg that names a folder it reads (confined to the data set folders), if any.
    `downloads`: it may download (with args.download true), so one local rank builds it first.
    `more_args`: args its builder reads that have no constant default (with `defaults`, every arg it
    accepts: the spec refuses any other at submit, naming the nearest).
    """

    name: str
    summary: str
    defaults: Mapping[str, Any] = field(default_factory=lambda: _frozen({}))
    size: Callable[[Args, str], int] | None = None
    path_arg: str | None = None
    downloads: bool = False
    more_args: tuple[str, ...] = ()

    @property
    def arg_names(self) -> tuple[str, ...]:
        """Every arg its builder accepts."""
        return (*self.defaults, *self.more_args)

    def args(self, given: Args) -> dict[str, Any]:
        """The args a builder receives: the defaults, overridden by what the spec gives."""
        return {**self.defaults, **given}


# --- models: parameter counts -------------------------------------------------------------------

RESNET_BODY_PARAMS = {18: 11_166_976, 50: 23_498_496}  # without conv1, the batch-norm after it, and fc
RESNET_FEATURES = {18: 512, 50: 2048}


def _mlp_params(args: Args, where: str) -> int:
    prev, total = whole(args, "in_features", where), 0
    for width in [*whole_list(args, "hidden", where), whole(args, "num_classes", where)]:
        total += prev * width + width
        prev = width
    return total


def _convnet_params(args: Args, where: str) -> int:
    c, k = whole(args, "in_channels", where), whole(args, "num_classes", where)
    return (32 * c * 9 + 32) + 64 + (64 * 32 * 9 + 64) + 128 + (64 * 16 * 128 + 128) + (128 * k + k)


def _resnet_params(depth: int) -> Callable[[Args, str], int]:
    def params(args: Args, where: str) -> int:
        c, k = whole(args, "in_channels", where), whole(args, "num_classes", where)
        return RESNET_BODY_PARAMS[depth] + 64 * c * 49 + 128 + RESNET_FEATURES[depth] * k + k

    return params


MODELS: Mapping[str, Builtin] = _frozen(
    {
        b.name: b
        for b in (
            Builtin(
                "mlp",
                "Flatten → (Linear → ReLU [→ Dropout]) per hidden width → Linear",
                _frozen({"in_features": 64, "hidden": 128, "num_classes": 10, "dropout": 0.0}),
                _mlp_params,
            ),
            Builtin(
                "convnet",
                "two convolutions with BatchNorm (PyTorch's MNIST example net); any image size ≥ 5×5",
                _frozen({"in_channels": 1, "num_classes": 10, "dropout": 0.25}),
                _convnet_params,
            ),
            Builtin(
                "resnet18",
                "torchvision's ResNet-18, untrained",
                _frozen({"num_classes": 10, "in_channels": 3}),
                _resnet_params(18),
            ),
            Builtin(
                "resnet50",
                "torchvision's ResNet-50, untrained",
                _frozen({"num_classes": 10, "in_channels": 3}),
                _resnet_params(50),
            ),
        )
    }
)

# --- data sets: numbers a generated set holds ---------------------------------------------------


def _synthetic_elements(args: Args, where: str) -> int:
    n, f = whole(args, "num_samples", where), whole(args, "num_features", where)
    out = whole(args, "num_outputs" if args.get("task") == "regression" else "num_classes", where)
    return n * f + f * out + n * out  # inputs, the label map, targets


def _fake_elements(args: Args, where: str) -> int:
    return whole(args, "num_samples", where) * math.prod(whole_list(args, "image_size", where))


_TORCHVISION = _frozen({"root": "data", "download": False})

DATA: Mapping[str, Builtin] = _frozen(
    {
        b.name: b
        for b in (
            Builtin("digits", "scikit-learn's 8×8 digits, 1,797 samples, no download", _frozen({"image": False})),
            Builtin("mnist", "MNIST (torchvision)", _TORCHVISION, path_arg="root", downloads=True),
            Builtin("fashion_mnist", "Fashion-MNIST (torchvision)", _TORCHVISION, path_arg="root", downloads=True),
            Builtin("cifar10", "CIFAR-10 (torchvision)", _TORCHVISION, path_arg="root", downloads=True),
            Builtin(
                "fake",
                "torchvision FakeData: random images, deterministic per index (random_offset: the job's seed)",
                _frozen({"num_samples": 256, "image_size": [3, 32, 32], "num_classes": 10}),
                _fake_elements,
                more_args=("random_offset",),
            ),
            Builtin(
                "synthetic",
                "seeded Gaussian inputs, labels from a fixed random linear map (seed: the job's)",
                _frozen(
                    {
                        "num_samples": 1024,
                        "num_features": 32,
                        "task": "classification",
                        "num_classes": 10,
                        "num_outputs": 1,
                    }
                ),
                _synthetic_elements,
                more_args=("seed",),
            ),
            Builtin(
                "image_folder",
                "an ImageFolder at args.path (path/train + path/val when both exist)",
                path_arg="path",
                more_args=("path", "image_size"),
            ),
        )
    }
)

LOSSES: tuple[str, ...] = ("cross_entropy", "mse")


def unknown_args(kind: str, name: str, args: Args) -> str | None:
    """Why `args` do not suit built-in `name` (`kind`: "model" or "data"), naming each unknown arg and the
    nearest accepted one; None when every arg is accepted, or `name` is not a built-in (user code takes
    whatever its function does)."""
    entry = (MODELS if kind == "model" else DATA).get(name)
    if entry is None:
        return None
    accepted = entry.arg_names
    unknown = [key for key in args if key not in accepted]
    if not unknown:
        return None
    takes = f"{name} takes {', '.join(accepted)}" if accepted else f"{name} takes no args"
    return "; ".join(f"unknown {kind} arg {key!r} for {name}; {_nearest(key, accepted) or takes}" for key in unknown)


def _nearest(key: str, accepted: tuple[str, ...]) -> str | None:
    close = difflib.get_close_matches(key, accepted, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def model_params(name: str, args: Args) -> int | None:
    """Parameters of built-in model `name` built with `args` (None: user code or not sized)."""
    entry = MODELS.get(name)
    if entry is None or entry.size is None:
        return None
    return entry.size(entry.args(args), "model.args")


def data_elements(name: str, args: Args) -> int | None:
    """Numbers built-in data set `name` generates from `args` (None: read from files, or user code)."""
    entry = DATA.get(name)
    if entry is None or entry.size is None:
        return None
    return entry.size(entry.args(args), "data.args")
