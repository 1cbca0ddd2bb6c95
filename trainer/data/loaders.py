"""DataLoaders: the training loader follows the layout; the validation loader takes a rank's shard."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from trainer.data.datasets import TensorPairDataset, collate_prebatched, is_prebatched, sized
from trainer.data.layout import BatchLayout, RankBatchSampler


def _loader_options(dataset: Dataset, num_workers: int, device: torch.device) -> dict[str, Any]:
    prebatched = is_prebatched(dataset)
    opts: dict[str, Any] = {
        "num_workers": num_workers,
        # Pinned host memory lets the host-to-GPU copy run asynchronously (non_blocking=True).
        "pin_memory": device.type == "cuda",
        "persistent_workers": False,
        # Its own generator: starting an iterator draws a worker base seed, and drawing it from the
        # global RNG would shift the dropout stream, so a resumed run would no longer match a straight one.
        "generator": torch.Generator().manual_seed(0),
    }
    if prebatched:
        opts["collate_fn"] = collate_prebatched
    if num_workers > 0:
        opts["prefetch_factor"] = 4
    return opts


class InMemoryLoader:
    """For a data set already in memory as tensors, with no worker processes: fetch each micro-batch
    with one indexing op. A DataLoader would add only per-batch bookkeeping here (tens of µs a step)."""

    def __init__(self, dataset: TensorPairDataset, sampler: RankBatchSampler, pin: bool) -> None:
        self.dataset, self.sampler, self.pin = dataset, sampler, pin

    def __iter__(self) -> Iterator[Any]:
        for indices in self.sampler:
            x, y = self.dataset.__getitems__(indices)
            yield (x.pin_memory(), y.pin_memory()) if self.pin else (x, y)

    def __len__(self) -> int:
        return len(self.sampler)


def train_loader(  # noqa: PLR0913 (train.py passes them positionally)
    dataset: Dataset,
    layout: BatchLayout,
    rank: int,
    start_step: int,
    end_step: int,
    num_workers: int,
    device: torch.device,
) -> Iterable[Any]:
    """Yields rank `rank`'s micro-batches for steps [start_step, end_step), `accumulation_steps` per step."""
    sampler = RankBatchSampler(layout, rank, start_step, end_step)
    if is_prebatched(dataset) and num_workers == 0:
        return InMemoryLoader(dataset, sampler, pin=device.type == "cuda")
    return DataLoader(dataset, batch_sampler=sampler, **_loader_options(dataset, num_workers, device))


def val_loader(
    dataset: Dataset, rank: int, world_size: int, batch_size: int, num_workers: int, device: torch.device
) -> DataLoader:
    """Rank `rank` evaluates samples rank, rank+W, ... (no padding: sums and counts are reduced, so
    uneven shards still give the exact mean over the whole validation set)."""
    if is_prebatched(dataset):
        shard = dataset.__class__(dataset.inputs[rank::world_size], dataset.targets[rank::world_size])
    else:
        shard = Subset(dataset, list(range(rank, sized(dataset), world_size)))
    return DataLoader(shard, batch_size=batch_size, shuffle=False, **_loader_options(shard, num_workers, device))


def to_device(batch: Any, device: torch.device) -> Any:
    """Move a batch (tensor, tuple, list or dict of them) to `device`; non_blocking pairs with pinned memory."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


def batch_length(batch: Any) -> int:
    """Samples in a batch: the length of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    if isinstance(batch, (list, tuple)) and batch:
        return batch_length(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_length(next(iter(batch.values())))
    raise TypeError(
        f"cannot tell the batch size of a {type(batch).__name__}; yield tensors, tuples or dicts of tensors"
    )
