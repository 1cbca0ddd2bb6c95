"""CPU/memory samples of a Slurm job's nodes (worker/slurm/samples.py): who samples, the series' names, and the
agent's reading of the files (whole lines only, each once). The live job's samples: tests/slurm/test_slurm_jobs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.slurm.samples import SampleTail, node_name, samples_file, start

pytestmark = pytest.mark.xdist_group("slurm")


@pytest.mark.parametrize(
    ("name", "node", "named"),
    [
        ("sys/rank3/cpu_percent", 1, "sys/rank3/cpu_percent"),  # global ranks: one name across nodes
        ("sys/cpu_percent_total", 0, "sys/cpu_percent_total"),  # node 0: as on any host
        ("sys/rss_mb_total", 2, "sys/node2/rss_mb_total"),
    ],
)
def test_node_name(name: str, node: int, named: str) -> None:
    assert node_name(name, node) == named


def test_only_local_rank_zero_of_a_job_samples(tmp_path: Path) -> None:
    env = {"RANKZERO_JOB_MARK": "7-1-slurm", "RANKZERO_RUN_DIR": str(tmp_path), "RANKZERO_ATTEMPT": "1"}
    assert start({**env, "SLURM_LOCALID": "1"}) is None
    assert start({"SLURM_LOCALID": "0"}) is None  # not a rankzero job


def test_the_agent_reads_whole_lines_once(tmp_path: Path) -> None:
    path = samples_file(tmp_path, 2, 1)
    path.parent.mkdir(parents=True)
    point = {"type": "metric", "time": 1.5, "step": 1500, "name": "sys/rank2/rss_mb", "value": 812.0}
    path.write_text(json.dumps(point) + "\n" + '{"type": "metric", "ti')
    tail = SampleTail(path.parent)
    assert tail.read() == [point]
    assert tail.read() == []
    with open(path, "a") as out:
        out.write('me": 6.5, "step": 6500, "name": "sys/rank2/rss_mb", "value": 813.0}\n')
    assert [p["step"] for p in tail.read()] == [6500]
