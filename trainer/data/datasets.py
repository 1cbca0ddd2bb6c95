"""Built-in and user data sets. Each builder returns (train, val); val may be None."""

from __future__ import annotations

import os
from collections.abc import Callable, Sized
from typing import Any, TypeGuard, cast

import torch
from torch.utils.data import Dataset, Subset

from trainer.catalogue import DATA
from trainer.data.confine import confine_from_env
from trainer.data.download import FETCHED_ENV, download_failed_message, download_lock, missing_message
from trainer.spec import DataSpec, is_user_code
from trainer.user_code import import_user_function


class TensorPairDataset(Dataset):
    """(inputs, targets) held in memory; `__getitems__` fetches a whole batch with one indexing op,
    so the DataLoader does not build and re-stack `batch_size` one-sample tuples every micro-step."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        if len(inputs) != len(targets):
            raise ValueError(f"{len(inputs)} inputs but {len(targets)} targets")
        self.inputs, self.targets = inputs, targets

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[i], self.targets[i]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(indices)
        return self.inputs[idx], self.targets[idx]

    def split(self, val_fraction: float, seed: int) -> tuple[TensorPairDataset, TensorPairDataset | None]:
        train_idx, val_idx = _split_indices(len(self), val_fraction, seed)
        train = TensorPairDataset(self.inputs[train_idx], self.targets[train_idx])
        val = TensorPairDataset(self.inputs[val_idx], self.targets[val_idx]) if len(val_idx) else None
        return train, val


def collate_prebatched(batch: Any) -> Any:
    """collate_fn for data sets whose `__getitems__` already returns a batch."""
    return batch


def sized(dataset: Dataset) -> int:
    """len() of a map-style data set: every one the trainer builds or imports has __len__ (torch's
    Dataset type does not declare it)."""
    return len(cast(Sized, dataset))


def is_prebatched(dataset: Dataset) -> TypeGuard[TensorPairDataset]:
    return isinstance(dataset, TensorPairDataset)


def _split_indices(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded hold-out split, identical on every rank."""
    n_val = int(round(n * val_fraction))
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return order[n_val:].sort().values, order[:n_val].sort().values


def _split_dataset(ds: Dataset, val_fraction: float, seed: int) -> tuple[Dataset, Dataset | None]:
    if isinstance(ds, TensorPairDataset):
        return ds.split(val_fraction, seed)
    train_idx, val_idx = _split_indices(sized(ds), val_fraction, seed)
    return Subset(ds, train_idx.tolist()), (Subset(ds, val_idx.tolist()) if len(val_idx) else None)


def _digits_table() -> tuple[Any, Any]:
    """(pixels float64 N×64, labels int64 N) of scikit-learn's bundled digits, as `load_digits` gives them.

    Read straight from the package's `datasets/data/digits.csv.gz` (what `load_digits` parses):
    importing scikit-learn (and SciPy behind it) costs each rank ~1.4 s at start. Falls back to
    `load_digits` if the file is not where this scikit-learn keeps it."""
    import gzip
    import importlib.util
    from pathlib import Path

    import numpy as np

    found = importlib.util.find_spec("sklearn")  # locates the package without importing it
    if found is not None and found.origin is not None:
        table = Path(found.origin).parent / "datasets" / "data" / "digits.csv.gz"
        if table.is_file():
            with gzip.open(table, "rt") as f:
                rows = np.loadtxt(f, delimiter=",")
            return rows[:, :-1], rows[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    return cast("tuple[Any, Any]", load_digits(return_X_y=True))  # the stub returns Bunch | tuple for both


def _digits(args: dict[str, Any], seed: int) -> TensorPairDataset:
    """scikit-learn's bundled 8×8 digits (1797 samples, no download). `image: true` gives 1×8×8 inputs."""
    pixels, labels = _digits_table()
    x = torch.tensor(pixels, dtype=torch.float32) / 16.0
    if args["image"]:
        x = x.view(-1, 1, 8, 8)
    return TensorPairDataset(x, torch.tensor(labels, dtype=torch.long))


def _synthetic(args: dict[str, Any], seed: int) -> TensorPairDataset:
    """Seeded Gaussian inputs; classification labels come from a fixed random linear map (learnable),
    or `task: regression` gives float targets of size `num_outputs`."""
    n = int(args["num_samples"])
    features = int(args["num_features"])
    gen = torch.Generator().manual_seed(int(args.get("seed", seed)))
    x = torch.randn(n, features, generator=gen)
    if args["task"] == "regression":
        w = torch.randn(features, int(args["num_outputs"]), generator=gen)
        return TensorPairDataset(x, x @ w + 0.1 * torch.randn(n, w.shape[1], generator=gen))
    w = torch.randn(features, int(args["num_classes"]), generator=gen)
    return TensorPairDataset(x, (x @ w).argmax(dim=1))


def _vision_transform(mean: tuple[float, ...], std: tuple[float, ...]) -> Callable[..., Any]:
    from torchvision import transforms

    return transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean, std)])


def _both_splits(cls: Any, root: str, download: bool, tf: Callable[..., Any]) -> tuple[Dataset, Dataset]:
    train = cls(root, train=True, download=download, transform=tf)
    return train, cls(root, train=False, download=download, transform=tf)


def _torchvision_split(cls_name: str, mean: tuple[float, ...], std: tuple[float, ...]):
    def build(args: dict[str, Any], seed: int) -> tuple[Dataset, Dataset]:
        import torchvision.datasets as tvd

        cls = getattr(tvd, cls_name)
        # Confined before torchvision touches (or, with download, creates) anything.
        root = confine_from_env(args["root"], "data.args.root")
        # Sandboxed, the worker fetched the files before the ranks started and the datasets dir is read-only
        # here (trainer/data/prefetch.py): read them, never write.
        download = bool(args["download"]) and os.environ.get(FETCHED_ENV) != "1"
        tf = _vision_transform(mean, std)
        if not download:
            try:
                return _both_splits(cls, str(root), False, tf)
            except RuntimeError as exc:
                if "not found" in str(exc).lower() or "corrupted" in str(exc).lower():
                    raise FileNotFoundError(missing_message(cls, root)) from exc
                raise
        # Once per host: every other rank and job waits for this download, then finds the files.
        with download_lock(root, cls_name):
            try:
                return _both_splits(cls, str(root), True, tf)
            except (RuntimeError, OSError) as exc:
                if isinstance(exc, OSError) or "download" in str(exc).lower():
                    raise RuntimeError(download_failed_message(cls, root, exc)) from exc
                raise

    return build


def _fake(args: dict[str, Any], seed: int) -> Dataset:
    """torchvision FakeData: random images, deterministic per index."""
    from torchvision import datasets, transforms

    size = tuple(args["image_size"])
    return datasets.FakeData(
        size=int(args["num_samples"]),
        image_size=size,
        num_classes=int(args["num_classes"]),
        transform=transforms.ToTensor(),
        random_offset=int(args.get("random_offset", seed)),
    )


def _image_folder(args: dict[str, Any], seed: int) -> Dataset | tuple[Dataset, Dataset]:
    """An ImageFolder at `path`; `path/train` + `path/val` are used as the split when both exist."""
    from torchvision import datasets, transforms

    if "path" not in args:
        raise ValueError("data 'image_folder' needs data.args.path: a folder with one sub-folder per class")
    root = confine_from_env(args["path"], "data.args.path")  # before anything lists the folder
    if not root.is_dir():
        raise FileNotFoundError(f"image_folder path {str(root)!r} is not a folder")
    steps = []
    if "image_size" in args:
        steps.append(transforms.Resize(args["image_size"]))
        steps.append(transforms.CenterCrop(args["image_size"]))
    steps.append(transforms.ToTensor())
    tf = transforms.Compose(steps)
    if (root / "train").is_dir() and (root / "val").is_dir():
        return datasets.ImageFolder(root / "train", transform=tf), datasets.ImageFolder(root / "val", transform=tf)
    return datasets.ImageFolder(root, transform=tf)


# One builder per catalogue entry; each receives its args merged with the catalogue's defaults.
BUILDERS: dict[str, Callable[[dict[str, Any], int], Any]] = {
    "digits": _digits,
    "synthetic": _synthetic,
    "mnist": _torchvision_split("MNIST", (0.1307,), (0.3081,)),
    "fashion_mnist": _torchvision_split("FashionMNIST", (0.2860,), (0.3530,)),
    "cifar10": _torchvision_split("CIFAR10", (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "fake": _fake,
    "image_folder": _image_folder,
}


def build_concurrently(spec: DataSpec) -> bool:
    """Whether every local rank may build `spec`'s data sets at the same time (nothing is downloaded).

    Built-in sets that never download (in memory, or only reading files) always may. A download
    (torchvision's `download: true`, or a user factory's) is done by local rank 0 while the others
    wait, then they read the files."""
    entry = DATA.get(spec.name)
    if entry is None:
        return False  # user code: it may download
    return not (entry.downloads and entry.args(spec.args)["download"])


def build_datasets(spec: DataSpec, seed: int) -> tuple[Dataset, Dataset | None]:
    """Train and validation sets. A single set is split by `val_fraction` (seeded, same on every rank)."""
    if is_user_code(spec.name):
        made = import_user_function(spec.name, "data factory")(**spec.args)
    else:
        made = BUILDERS[spec.name](DATA[spec.name].args(spec.args), seed)
    if isinstance(made, tuple):
        if len(made) != 2:
            raise ValueError(
                f"data factory {spec.name!r} returned a {len(made)}-tuple; return a Dataset or (train, val)"
            )
        return made[0], made[1]
    if not isinstance(made, Dataset):
        raise TypeError(f"data {spec.name!r} returned {type(made).__name__}; return a torch Dataset or (train, val)")
    if spec.val_fraction == 0.0:
        return made, None
    return _split_dataset(made, spec.val_fraction, seed)
