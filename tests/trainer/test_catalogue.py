"""The built-in catalogue (trainer/catalogue.py): one place for names, default args and size
formulas, which the spec, the builders and the submit limits all read. The formulas are checked
against the real builders (they count what torch would allocate)."""

from __future__ import annotations

import inspect
import re

import pytest
from pydantic import ValidationError

from trainer import catalogue
from trainer.spec import BUILTIN_DATA, BUILTIN_LOSSES, BUILTIN_MODELS, DataSpec, ModelSpec


def test_the_spec_names_exactly_the_catalogue() -> None:
    assert BUILTIN_MODELS == tuple(catalogue.MODELS) == ("mlp", "convnet", "resnet18", "resnet50")
    assert tuple(catalogue.DATA) == BUILTIN_DATA
    assert BUILTIN_LOSSES == catalogue.LOSSES
    assert ModelSpec().name in catalogue.MODELS and DataSpec().name in catalogue.DATA


def test_every_catalogue_entry_has_a_builder_and_its_defaults_are_the_builders() -> None:
    from trainer.data import datasets
    from trainer.models import BUILDERS

    assert set(BUILDERS) == set(catalogue.MODELS) and set(datasets.BUILDERS) == set(catalogue.DATA)
    for name, entry in catalogue.MODELS.items():
        params = inspect.signature(BUILDERS[name]).parameters
        assert {k: p.default for k, p in params.items()} == dict(entry.defaults), name


def test_every_builtin_accepts_exactly_the_args_its_builder_reads() -> None:
    """The accepted names (defaults + more_args) are the one list the spec checks at submit: a model's are its
    builder's parameters, a data set's the keys its builder reads from args."""
    from trainer.data import datasets
    from trainer.models import BUILDERS

    for name, entry in catalogue.MODELS.items():
        assert entry.arg_names == tuple(inspect.signature(BUILDERS[name]).parameters), name
    for name, entry in catalogue.DATA.items():
        source = inspect.getsource(datasets.BUILDERS[name])
        read = re.findall(r'args(?:\[|\.get\()"(\w+)"', source) + re.findall(r'"(\w+)" in args', source)
        assert set(read) == set(entry.arg_names), name


@pytest.mark.parametrize(
    ("kind", "name", "args", "says"),
    [("model", "mlp", {"hidden": 8, "dropout": 0.1}, None),
     ("model", "mlp", {"hiden": 8}, "unknown model arg 'hiden' for mlp; did you mean 'hidden'?"),
     ("model", "mlp", {"Hidden": 8}, "unknown model arg 'Hidden' for mlp; did you mean 'hidden'?"),
     ("model", "convnet", {"in_channel": 3}, "unknown model arg 'in_channel' for convnet; did you mean 'in_channels'?"),
     ("model", "resnet50", {"num_clases": 3},
      "unknown model arg 'num_clases' for resnet50; did you mean 'num_classes'?"),
     ("model", "resnet18", {"zzz": 1}, "unknown model arg 'zzz' for resnet18; resnet18 takes num_classes, in_channels"),
     ("model", "pkg.mod:build", {"anything": 1}, None),
     ("data", "synthetic", {"seed": 3, "task": "regression"}, None),
     ("data", "synthetic", {"num_sample": 3},
      "unknown data arg 'num_sample' for synthetic; did you mean 'num_samples'?"),
     ("data", "digits", {"images": True}, "unknown data arg 'images' for digits; did you mean 'image'?"),
     ("data", "mnist", {"downlaod": True}, "unknown data arg 'downlaod' for mnist; did you mean 'download'?"),
     ("data", "fake", {"random_offset": 2, "image_size": [1, 2, 2]}, None),
     ("data", "image_folder", {"pth": "x"}, "unknown data arg 'pth' for image_folder; did you mean 'path'?"),
     ("data", "cifar10", {"a": 1, "rot": 2},
      "unknown data arg 'a' for cifar10; cifar10 takes root, download; unknown data arg 'rot' for cifar10; "
      "did you mean 'root'?"),
     ("data", "labcode:data", {"anything": 1}, None)],
)  # fmt: skip
def test_an_unknown_arg_is_named_with_the_nearest(kind: str, name: str, args: dict, says: str | None) -> None:
    assert catalogue.unknown_args(kind, name, args) == says


def test_the_spec_refuses_an_unknown_arg_at_the_args_field() -> None:
    with pytest.raises(ValidationError) as info:
        ModelSpec(args={"hiden": 3})
    [error] = info.value.errors()
    assert error["loc"] == ("args",) and error["msg"] == "unknown model arg 'hiden' for mlp; did you mean 'hidden'?"
    with pytest.raises(ValidationError, match="did you mean 'num_features'"):
        DataSpec(name="synthetic", args={"num_feature": 3})
    with pytest.raises(ValidationError) as info:  # an unknown name is refused as such, not its args as well
        ModelSpec(name="mpl", args={"hidden": 3})
    assert [e["loc"] for e in info.value.errors()] == [("name",)]


@pytest.mark.parametrize(
    ("name", "args"),
    [("mlp", {}), ("mlp", {"in_features": 10, "hidden": [7, 5], "num_classes": 3}), ("convnet", {}),
     ("convnet", {"in_channels": 3, "num_classes": 100}), ("resnet18", {}), ("resnet18", {"in_channels": 1}),
     ("resnet50", {"num_classes": 1000})],
)  # fmt: skip
def test_model_params_match_the_built_model(name, args) -> None:
    pytest.importorskip("torchvision")
    from trainer.models import build_model

    model = build_model(ModelSpec(name=name, args=args))
    assert catalogue.model_params(name, args) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "args"),
    [("synthetic", {}), ("synthetic", {"num_samples": 100, "num_features": 7, "num_classes": 3}),
     ("synthetic", {"num_samples": 50, "num_features": 4, "task": "regression", "num_outputs": 2})],
)  # fmt: skip
def test_synthetic_elements_match_the_built_tensors(name, args) -> None:
    from trainer.data.datasets import build_datasets

    train, _ = build_datasets(DataSpec(name=name, args=args, val_fraction=0.0), seed=0)
    n, features = train.inputs.shape
    # outputs: the label map's width (num_classes, or num_outputs for regression)
    out = train.targets.shape[1] if args.get("task") == "regression" else args.get("num_classes", 10)
    assert catalogue.data_elements(name, args) == n * features + features * out + n * out


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [("fake", {}, 256 * 3 * 32 * 32), ("fake", {"num_samples": 2, "image_size": [1, 4, 4]}, 32),
     ("synthetic", {}, 1024 * 32 + 32 * 10 + 1024 * 10), ("digits", {}, None), ("mnist", {}, None),
     ("image_folder", {"path": "x"}, None), ("pkg.mod:fn", {}, None)],
)  # fmt: skip
def test_data_elements(name, args, expected) -> None:
    assert catalogue.data_elements(name, args) == expected


@pytest.mark.parametrize(
    ("name", "args", "key"),
    [("mlp", {"hidden": "big"}, "hidden"), ("mlp", {"hidden": []}, "hidden"),
     ("mlp", {"in_features": -1}, "in_features"), ("convnet", {"num_classes": True}, "num_classes"),
     ("resnet18", {"in_channels": 1.5}, "in_channels")],
)  # fmt: skip
def test_an_arg_that_cannot_be_sized_names_itself(name, args, key) -> None:
    with pytest.raises(catalogue.ArgError, match=f"model.args.{key} must be") as info:
        catalogue.model_params(name, args)
    assert info.value.key == key


def test_user_code_is_not_sized() -> None:
    assert catalogue.model_params("pkg.mod:build", {"hidden": 10**9}) is None


def test_folder_args_and_downloads() -> None:
    from trainer.data.confine import path_arg

    assert {n: path_arg(n) for n in catalogue.DATA if path_arg(n)} == {
        "mnist": "root", "fashion_mnist": "root", "cifar10": "root", "image_folder": "path"
    }  # fmt: skip
    assert {n for n, e in catalogue.DATA.items() if e.downloads} == {"mnist", "fashion_mnist", "cifar10"}


def test_build_concurrently_only_without_a_download() -> None:
    from trainer.data.datasets import build_concurrently

    assert build_concurrently(DataSpec(name="digits"))
    assert build_concurrently(DataSpec(name="mnist"))
    assert not build_concurrently(DataSpec(name="mnist", args={"download": True}))
    assert not build_concurrently(DataSpec(name="pkg.mod:make"))
