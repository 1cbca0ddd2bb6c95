"""GPU health: read each GPU's errors and temperature through a small interface, judge it (pure), and
tell the hosts table which GPUs are failing and why (the scheduler then leaves them out: core/hosts.py).

Sources: NVML (nvidia-ml-py, when installed and a driver answers) or a JSON file written by something
else (RANKZERO_GPU_HEALTH_FILE: a site's own health check, like Slurm's, or a test's stand-in):
`{"0": {"xid": [79], "ecc_uncorrected": 0, "temperature_c": 65}, ...}`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("rankzero.worker")

# Xid codes that mean the GPU (not the program) is in trouble (NVIDIA's Xid catalogue): double-bit ECC,
# fallen off the bus, row remap failure, GSP and uncontained errors, page retirement failures, …
FATAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 123, 140})


@dataclass(frozen=True)
class GpuReading:
    xids: tuple[int, ...] = ()  # critical Xid events seen since the last reading
    ecc_uncorrected: int = 0  # volatile uncorrected ECC errors
    temperature_c: int | None = None
    hw_slowdown: bool = False  # the hardware throttles it (power brake, HW slowdown)
    error: str | None = None  # the GPU could not be read at all


class GpuSource(Protocol):
    def read(self, gpus: Sequence[str]) -> dict[str, GpuReading]: ...


def judge(reading: GpuReading, max_temp_c: int) -> str | None:
    """Why a GPU must leave placement (None: healthy)."""
    fatal = [x for x in reading.xids if x in FATAL_XIDS]
    if fatal:
        return f"Xid {', '.join(map(str, fatal))} (a hardware fault; see nvidia-smi -q and the kernel log)"
    if reading.ecc_uncorrected > 0:
        return f"{reading.ecc_uncorrected} uncorrected ECC error(s) (volatile): reset the GPU or replace it"
    if reading.error:
        return f"unreadable: {reading.error}"
    if reading.temperature_c is not None and reading.temperature_c > max_temp_c:
        return f"{reading.temperature_c} °C, above {max_temp_c} °C (RANKZERO_GPU_MAX_TEMP_C)"
    if reading.hw_slowdown:
        return "throttled by the hardware (HW slowdown or power brake)"
    return None


@dataclass
class Tracker:
    """Faults stick: an Xid or ECC fault stays until the worker restarts (a reset GPU is a new worker); a
    temperature or throttle fault clears when the GPU reads healthy again."""

    sticky: dict[str, str] = field(default_factory=dict)

    def faults(self, readings: Mapping[str, GpuReading], max_temp_c: int) -> dict[str, str]:
        out = dict(self.sticky)
        for gpu, reading in readings.items():
            reason = judge(reading, max_temp_c)
            if reason is None:
                continue
            if reading.xids or reading.ecc_uncorrected:
                self.sticky[gpu] = reason
            out[gpu] = reason
        return out


class FileSource:
    """Readings from a JSON file (missing file: every GPU healthy)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self, gpus: Sequence[str]) -> dict[str, GpuReading]:
        try:
            data: Any = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("GPU health file %s unreadable: %s", self.path, exc)
            return {}
        out = {}
        for gpu in gpus:
            raw = data.get(gpu) if isinstance(data, dict) else None
            if isinstance(raw, dict):
                out[gpu] = GpuReading(
                    xids=tuple(int(x) for x in raw.get("xid", []) if isinstance(x, int)),
                    ecc_uncorrected=int(raw.get("ecc_uncorrected", 0) or 0),
                    temperature_c=raw.get("temperature_c") if isinstance(raw.get("temperature_c"), int) else None,
                    hw_slowdown=bool(raw.get("hw_slowdown", False)),
                    error=str(raw["error"])[:200] if raw.get("error") else None,
                )
        return out


class NvmlSource:
    """Readings through NVML (pynvml from nvidia-ml-py). Every call may be unsupported on a given GPU:
    what cannot be read is left out, not counted as a fault."""

    def __init__(self) -> None:
        import pynvml  # type: ignore[import-not-found]  # optional: only on GPU hosts

        self.nv = pynvml
        pynvml.nvmlInit()
        self.events: Any = None
        try:
            self.events = pynvml.nvmlEventSetCreate()
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self.events)
        except Exception:  # Xid events need a driver that supports them; the other checks still run
            log.info("NVML Xid events unavailable on this host", exc_info=True)

    def _xids(self) -> dict[str, list[int]]:
        seen: dict[str, list[int]] = {}
        while self.events is not None:
            try:
                data = self.nv.nvmlEventSetWait_v2(self.events, 0)
            except Exception:  # timeout: nothing pending
                break
            index = str(self.nv.nvmlDeviceGetIndex(data.device))
            seen.setdefault(index, []).append(int(data.eventData))
        return seen

    def read(self, gpus: Sequence[str]) -> dict[str, GpuReading]:
        nv, xids, out = self.nv, self._xids(), {}
        for gpu in gpus:
            if not gpu.isdigit():
                continue
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(int(gpu))
            except Exception as exc:
                out[gpu] = GpuReading(error=str(exc)[:200])
                continue
            out[gpu] = GpuReading(
                xids=tuple(xids.get(gpu, ())),
                ecc_uncorrected=_try(
                    lambda h=handle: nv.nvmlDeviceGetTotalEccErrors(
                        h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
                    ),
                    0,
                ),
                temperature_c=_try(lambda h=handle: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU), None),
                hw_slowdown=bool(
                    _try(lambda h=handle: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h), 0)
                    & (
                        nv.nvmlClocksThrottleReasonHwSlowdown
                        | getattr(nv, "nvmlClocksThrottleReasonHwPowerBrakeSlowdown", 0)
                    )
                ),
            )
        return out


def _try(call: Any, default: Any) -> Any:
    try:
        return call()
    except Exception:
        return default


def make_source(mode: str, health_file: Path | None) -> GpuSource | None:
    """The source the settings ask for (None: no checks: 'off', or NVML absent)."""
    if health_file is not None:
        return FileSource(health_file)
    if mode == "off":
        return None
    try:
        return NvmlSource()
    except Exception as exc:  # no nvidia-ml-py or no driver: a CPU host
        log.info("GPU health checks off: NVML unavailable (%s)", type(exc).__name__)
        return None
