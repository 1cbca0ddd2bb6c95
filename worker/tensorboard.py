"""TensorBoard scalars as metrics: a script that logs with `SummaryWriter($RANKZERO_TENSORBOARD_DIR)`
has its scalars in the job's charts with no code change. Torch-free (the event protobufs come from the
`tensorboard` package; no TensorFlow, no torch).

`TensorBoardTail(<run>/tensorboard).read()` returns the scalars appended to the event files
(`*tfevents*`, in any sub-folder) since the last call, as `metric` events (without a seq) that
`Ingestor.ingest_metrics` writes like events.jsonl's: name = the tag (prefixed with the sub-folder
when the file is not at the top), step = the global step, value, time = the event's wall time.

Each file is a sequence of TFRecords (length, masked CRC-32C of the length, data, CRC of the data);
a record still being written (the file ends inside it) is left for the next call, and a length whose
CRC does not match ends the reading of that file (it is corrupt from there on).

Idempotent: the Ingestor keeps a point only past the highest step it holds for that name, so a
re-read (a restarted worker reads the files from the start) writes nothing twice; it numbers the
points in a seq space of their own (core/metric_rollup.py EXTERNAL_SEQ_BASE and up), which never
meets events.jsonl's.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Any

from tensorboard.compat.proto import event_pb2

from core import run_files
from trainer.event_types import EventType
from worker.ingest_handlers import TimedMetric

log = logging.getLogger("rankzero.worker")
FILE_GLOB = "*tfevents*"
MAX_RECORD_BYTES = 64 << 20  # larger than any scalar event by far; a bigger length is corruption
_HEADER = struct.Struct("<QI")
_DT_FLOAT, _DT_DOUBLE = 1, 2


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _tensor_scalar(tensor: Any) -> float | None:
    """A 0-dimensional float/double tensor's value (new-style scalar summaries), else None."""
    if tensor.tensor_shape.dim:
        return None
    if tensor.dtype == _DT_FLOAT:
        if tensor.float_val:
            return float(tensor.float_val[0])
        return struct.unpack("<f", tensor.tensor_content)[0] if len(tensor.tensor_content) == 4 else None
    if tensor.dtype == _DT_DOUBLE:
        if tensor.double_val:
            return float(tensor.double_val[0])
        return struct.unpack("<d", tensor.tensor_content)[0] if len(tensor.tensor_content) == 8 else None
    return None


def scalars(event: Any) -> list[tuple[str, float]]:
    """(tag, value) of the scalar summaries in one Event (images, histograms, text: skipped)."""
    found = []
    for value in event.summary.value:
        if value.HasField("simple_value"):
            found.append((value.tag, float(value.simple_value)))
        elif value.HasField("tensor"):
            v = _tensor_scalar(value.tensor)
            if v is not None:
                found.append((value.tag, v))
    return found


class _File:
    """One event file being read: where the next record starts, and whether it went bad."""

    def __init__(self, path: Path, prefix: str, root: Path | None = None) -> None:
        self.path = path
        self.prefix = prefix
        self.root = root or path.parent  # the job's folder: no link below it is followed (core/run_files.py)
        self.offset = 0
        self.broken = False

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def records(self, max_bytes: int) -> list[bytes]:
        if self.broken:
            return []
        try:
            with run_files.open_file(self.path, "rb", self.root) as fh:  # a FIFO would block the watcher
                fh.seek(self.offset)
                chunk = fh.read(max_bytes)
        except OSError:
            return []
        out, pos = [], 0
        while len(chunk) - pos >= _HEADER.size:
            length, length_crc = _HEADER.unpack_from(chunk, pos)
            if masked_crc32c(chunk[pos : pos + 8]) != length_crc or length > MAX_RECORD_BYTES:
                log.warning("%s: corrupt record at byte %d; the rest of the file is skipped", self.path, self.offset)
                self.broken = True
                break
            end = pos + _HEADER.size + length + 4
            if end > len(chunk):
                if end - pos > max_bytes and self._size() >= self.offset + end:
                    pos = end  # complete but bigger than one read (an image, say): no scalar, skipped whole
                break  # else still being written (or past this read): the next call reads it
            out.append(chunk[pos + _HEADER.size : pos + _HEADER.size + length])
            pos = end
        self.offset += pos
        return out


class TensorBoardTail:
    """Scalars appended under `root` (a job's tensorboard folder) since the last call, as metric events."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[Path, _File] = {}

    def _discover(self) -> list[_File]:
        if not self.root.is_dir():
            return []
        for path in self.root.rglob(FILE_GLOB):
            if path not in self._files and path.is_file():
                rel = path.parent.relative_to(self.root).as_posix()
                self._files[path] = _File(path, "" if rel == "." else rel + "/", self.root)
        return [self._files[p] for p in sorted(self._files)]

    def read(self, max_bytes: int = 8 << 20) -> list[TimedMetric]:
        events: list[TimedMetric] = []
        for f in self._discover():
            for record in f.records(max_bytes):
                events.extend(_metric_events(record, f.prefix))
        return events


def _metric_events(record: bytes, prefix: str) -> list[TimedMetric]:
    try:
        # protobuf's generated module declares its messages at run time, which the checker cannot see
        event = event_pb2.Event.FromString(record)  # pyright: ignore[reportAttributeAccessIssue]
    except Exception:  # protobuf's DecodeError; a record that is no Event is skipped
        return []
    out: list[TimedMetric] = []
    for tag, value in scalars(event):
        out.append(
            {
                "type": EventType.metric.value,
                "time": float(event.wall_time),
                "step": int(event.step),
                "name": (prefix + tag)[:200],
                "value": value,
            }
        )
    return out
