"""worker/resources.py with real processes: a stand-in job (a launcher, two ranks in sessions of their own as
torchrun starts them, a forked DataLoader-like worker) carrying a job mark, sampled from /proc."""

from __future__ import annotations

import logging
import math
import os
import re
import select
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.procs import MARKER_ENV, end_everything, new_marker, stop_group
from worker.launch_command import MARK_ENV
from worker.resources import ResourceWatch, Sample

# The launcher plays torchrun (the mark, no RANK); rank 0 holds 200 MiB and forks a worker that shares them
# copy-on-write (RSS counts them twice, PSS once); rank 1 spins. Each rank says "ready" when it is.
LAUNCHER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    RANK0 = '''
    import os, sys, time
    held = bytearray(200 * 2**20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    print("rank0 ready", flush=True)
    time.sleep(60)
    '''
    RANK1 = '''
    import os, time
    def say():
        with open(os.environ["CPU_FILE"] + ".tmp", "w") as fh:
            fh.write(f"{time.monotonic()} {time.process_time()}")
        os.replace(os.environ["CPU_FILE"] + ".tmp", os.environ["CPU_FILE"])
    say()
    print("rank1 ready", flush=True)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        now = time.monotonic()
        while time.monotonic() < now + 0.02:
            pass
        say()
    '''
    ranks = []
    for rank, code in enumerate((RANK0, RANK1)):
        env = {**os.environ, "RANK": str(rank), "TORCHELASTIC_RUN_ID": "test"}
        ranks.append(subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True))
    time.sleep(60)
    """
)
NO_DEFAULT = SimpleNamespace()  # settings without a server-wide memory limit


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The stand-in job, running; its mark. Everything it started ends with it (found by this test's marker)."""
    marker, mark = new_marker(), f"7-1-{uuid.uuid4().hex}"
    env = {**os.environ, MARKER_ENV: marker, MARK_ENV: mark, "CPU_FILE": str(_cpu_file(tmp_path_factory))}
    for name in ("RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert select.select([launcher.stdout], [], [], 20)[0], "the stand-in ranks did not start"
        ready = {launcher.stdout.readline().strip() for _ in range(2)}
        assert ready == {"rank0 ready", "rank1 ready"}, ready
        yield mark
    finally:
        stop_group(launcher)
        end_everything(marker)  # the ranks and the worker are in sessions of their own


def _points(sample: Sample | None) -> dict[str, float]:
    assert sample is not None
    return dict(sample.points)


def _rss_sum_mb(mark: str) -> float:
    """What summing plain RSS would say: the forked worker's shared pages counted a second time."""
    from worker.procs import pids_with_mark

    total = 0
    for pid in pids_with_mark(mark):
        with open(f"/proc/{pid}/statm") as fh:
            total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return total / 2**20


def test_memory_per_rank_and_total_counts_shared_pages_once(job):
    points = _points(ResourceWatch(job, memory_limit_mb=None, gpus=None, settings=NO_DEFAULT).poll(0.0, 0))
    assert points["sys/rank0/rss_mb"] >= 150  # the 200 MiB rank 0 holds (its worker's share included)
    assert points["sys/rank1/rss_mb"] < 100
    assert points["sys/rss_mb_total"] >= points["sys/rank0/rss_mb"] + points["sys/rank1/rss_mb"]
    # PSS: rank 0 and its worker share the 200 MiB; summed RSS counts them twice.
    assert _rss_sum_mb(job) >= 400
    assert points["sys/rss_mb_total"] < _rss_sum_mb(job) - 150
    assert not [name for name in points if "gpu" in name or "cpu_percent" in name]  # no CPU rate in a first sample


def test_over_the_spec_limit_names_the_numbers(job):
    sample = ResourceWatch(job, memory_limit_mb=100, gpus=None, settings=NO_DEFAULT).poll(0.0, 3)
    assert sample is not None and sample.over_limit is not None
    total = dict(sample.points)["sys/rss_mb_total"]
    said = re.fullmatch(
        r"the job's processes use ([\d,]+) MiB resident memory, over its memory_limit_mb 100: .*", sample.over_limit
    )
    assert said is not None, sample.over_limit
    assert int(said[1].replace(",", "")) == math.ceil(total) or abs(int(said[1].replace(",", "")) - total) < 1
    assert "raise memory_limit_mb or lower batch_size" in sample.over_limit
    assert "\n" not in sample.over_limit
    # The points are keyed by the sample's wall-clock time (ms), not the job's step (issue 22).
    assert sample.step == 3 and {e["step"] for e in sample.events()} == {int(sample.at * 1000)}


def test_no_limit_and_a_limit_above_use_are_not_over(job):
    assert ResourceWatch(job, memory_limit_mb=None, gpus=None, settings=NO_DEFAULT).poll(0.0, 0).over_limit is None
    assert ResourceWatch(job, memory_limit_mb=4096, gpus=None, settings=NO_DEFAULT).poll(0.0, 0).over_limit is None


def test_the_server_default_applies_when_the_spec_sets_none(job):
    server = SimpleNamespace(job_memory_limit_mb=100)
    over = ResourceWatch(job, memory_limit_mb=None, gpus=None, settings=server).poll(0.0, 0).over_limit
    assert over is not None and "the server's RANKZERO_JOB_MEMORY_LIMIT_MB 100" in over
    # the spec's own limit wins over the default
    assert ResourceWatch(job, memory_limit_mb=4096, gpus=None, settings=server).poll(0.0, 0).over_limit is None


def test_the_limit_is_judged_on_pss_even_when_the_budget_read_none(job):
    """With no time to read smaps_rollup, the figures are RSS (an upper bound); a limit the RSS sum passes but
    PSS does not is not 'over': every process is read before over_limit is said."""
    rss_sum, pss = (
        _rss_sum_mb(job),
        _points(ResourceWatch(job, memory_limit_mb=None, gpus=None, settings=NO_DEFAULT).poll(0, 0)),
    )
    between = int((rss_sum + pss["sys/rss_mb_total"]) / 2)
    lazy = ResourceWatch(job, memory_limit_mb=None, gpus=None, settings=NO_DEFAULT, pss_budget_s=0)
    assert _points(lazy.poll(0.0, 0))["sys/rss_mb_total"] >= rss_sum - 20  # nothing read: RSS
    judged = ResourceWatch(job, memory_limit_mb=between, gpus=None, settings=NO_DEFAULT, pss_budget_s=0)
    sample = judged.poll(0.0, 0)
    assert sample.over_limit is None
    assert dict(sample.points)["sys/rss_mb_total"] < between


def _cpu_file(factory) -> Path:
    """Where rank 1 says how much CPU it got (its own process_time)."""
    return factory.getbasetemp() / "rank1_cpu"


def _spinner_cpu(path: Path) -> tuple[float, float]:
    wall, cpu = path.read_text().split()
    return float(wall), float(cpu)


def test_cpu_percent_of_a_spinning_rank_and_the_interval(job, tmp_path_factory):
    watch = ResourceWatch(job, memory_limit_mb=None, gpus=None, interval_s=5.0, settings=NO_DEFAULT)
    first = _spinner_cpu(_cpu_file(tmp_path_factory))
    assert watch.poll(100.0, 0) is not None
    assert watch.poll(101.0, 0) is None  # under interval_s since the last sample
    time.sleep(1.5)
    points = _points(watch.poll(105.0, 1))
    last = _spinner_cpu(_cpu_file(tmp_path_factory))
    # What the spinner itself measured it got (six agents share two cores here: it may get less than one).
    got = 100 * (last[1] - first[1]) / (last[0] - first[0])
    assert abs(points["sys/rank1/cpu_percent"] - got) <= max(10, 0.2 * got), (points, got)
    if got > 60:
        assert points["sys/rank1/cpu_percent"] > 50
    assert points["sys/rank0/cpu_percent"] < 25  # rank 0 and its worker sleep
    assert points["sys/cpu_percent_total"] >= points["sys/rank1/cpu_percent"]


def test_a_job_without_processes_has_no_points():
    watch = ResourceWatch(f"7-1-{uuid.uuid4().hex}", memory_limit_mb=100, gpus=None, interval_s=0, settings=NO_DEFAULT)
    watch.poll(0.0, 0)
    sample = watch.poll(1.0, 5)  # a second poll: CPU rates would come now
    assert sample is not None and sample.points == [] and sample.over_limit is None and sample.events() == []


def test_a_poll_is_cheap(job):
    watch = ResourceWatch(job, memory_limit_mb=1_000_000, gpus=None, interval_s=0, settings=NO_DEFAULT)
    watch.poll(0.0, 0)
    started = time.process_time()  # CPU time, ours and the kernel's reading /proc for us: not the machine's load
    for i in range(5):
        watch.poll(float(i + 1), i)
    per_poll = (time.process_time() - started) / 5
    print(f"a poll: {per_poll * 1000:.1f} ms CPU")
    # A poll scans all of /proc, so its CPU grows with the machine's process count: bounded at a tenth of
    # the default 5 s interval (27.5 ms measured at load 6 with ~130 processes: 18x), not at a tight figure.
    assert per_poll < 0.5


class FakeNvml:
    """pynvml's functions, for two GPUs; power unsupported on GPU 2 (as on some boards)."""

    class NotSupported(Exception):
        pass

    def __init__(self):
        self.started = 0

    def nvmlInit(self):
        self.started += 1

    def nvmlShutdown(self):
        self.started -= 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=90 + handle, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=(1000 + handle) * 2**20, total=80 * 2**30, free=0)

    def nvmlDeviceGetPowerUsage(self, handle):
        if handle == 2:
            raise self.NotSupported("Not Supported")
        return 250_500  # milliwatts


def test_gpu_points_from_nvml(job, caplog):
    nvml = FakeNvml()
    watch = ResourceWatch(job, memory_limit_mb=None, gpus=["0", "2"], nvml=nvml, interval_s=0, settings=NO_DEFAULT)
    with caplog.at_level(logging.WARNING, logger="worker.resources"):
        points = _points(watch.poll(0.0, 0))
        watch.poll(1.0, 1)
    assert points["sys/gpu0/util_percent"] == 90
    assert points["sys/gpu0/memory_mb"] == 1000
    assert points["sys/gpu0/power_w"] == 250.5
    assert points["sys/gpu2/util_percent"] == 92 and points["sys/gpu2/memory_mb"] == 1002
    assert "sys/gpu2/power_w" not in points and "sys/gpu1/util_percent" not in points
    assert len([r for r in caplog.records if "power_w" in r.getMessage()]) == 1  # said once, not per poll
    watch.close()
    assert nvml.started == 0


def test_no_gpu_sampling_without_a_lease_even_with_nvml(job):
    nvml = FakeNvml()
    points = _points(ResourceWatch(job, memory_limit_mb=None, gpus=[], nvml=nvml, settings=NO_DEFAULT).poll(0.0, 0))
    assert not [n for n in points if "gpu" in n] and nvml.started == 0


def test_nvml_that_fails_to_start_means_no_gpu_points(job):
    class Broken(FakeNvml):
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    points = _points(
        ResourceWatch(job, memory_limit_mb=None, gpus=["0"], nvml=Broken(), settings=NO_DEFAULT).poll(0.0, 0)
    )
    assert not [n for n in points if "gpu" in n]


def test_neither_nvml_nor_nvidia_smi_no_gpu_points_no_error(job, monkeypatch, tmp_path, caplog):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    watch = ResourceWatch(job, memory_limit_mb=None, gpus=["0"], interval_s=0, settings=NO_DEFAULT)
    with caplog.at_level(logging.WARNING, logger="worker.resources"):
        samples = [watch.poll(float(i), i) for i in range(3)]
    assert all(s is not None and not [n for n, _ in s.points if "gpu" in n] for s in samples)
    assert "sys/rss_mb_total" in dict(samples[0].points)
    assert len(caplog.records) == 1 and "neither NVML" in caplog.records[0].getMessage()


def test_gpu_points_from_nvidia_smi(job, monkeypatch, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/args\n'
        "echo '0, 87, 30210, 301.25'\necho '1, 5, 1, 60.00'\necho '3, 12, 4000, [N/A]'\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    points = _points(ResourceWatch(job, memory_limit_mb=None, gpus=["0", "3"], settings=NO_DEFAULT).poll(0, 0))
    assert points["sys/gpu0/util_percent"] == 87 and points["sys/gpu0/memory_mb"] == 30210
    assert points["sys/gpu0/power_w"] == 301.2 or points["sys/gpu0/power_w"] == 301.3
    assert points["sys/gpu3/memory_mb"] == 4000 and "sys/gpu3/power_w" not in points
    assert "sys/gpu1/util_percent" not in points  # not leased to this job
    assert "--id=0,3" in (tmp_path / "args").read_text()


def test_a_sandboxed_attempt_is_listed_by_its_cgroup_not_by_scanning_every_process(monkeypatch):
    """Issue 29: reading every process's environment each sample was a third of the worker's CPU during a
    job; an attempt with a cgroup (worker/sandbox.py) is listed by it, escapees included."""
    from types import SimpleNamespace

    from worker import resources, sandbox

    cgroup = SimpleNamespace(pids=lambda: [os.getpid()])
    monkeypatch.setitem(sandbox._live, "job-1-abc", SimpleNamespace(cgroup=cgroup))
    scanned: list[str] = []
    monkeypatch.setattr(resources, "pids_with_mark", lambda mark: scanned.append(mark) or [4242])
    assert resources.job_pids("job-1-abc") == [os.getpid()] and scanned == []
    assert resources.job_pids("job-2-def") == [4242] and scanned == ["job-2-def"]  # no cgroup: the scan
    empty = SimpleNamespace(cgroup=SimpleNamespace(pids=list))
    monkeypatch.setitem(sandbox._live, "job-3-ghi", empty)  # a cgroup no process has joined yet: the scan
    assert resources.job_pids("job-3-ghi") == [4242]
