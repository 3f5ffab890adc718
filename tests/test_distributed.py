"""A step across ranks (`perfguard.distributed`), on the CPU with gloo at world size 2: timed
as the slowest rank's, its ranks' failures named, no rank process left behind, stored and
in same-job A/B."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from perfguard.measure.distributed import DistributedJob, unhostable
from perfguard.measure.job import MeasureSettings
from perfguard.measure.stacks import innermost_line
from perfguard.stats.why import why_of
from tests import forkserver
from tests.factories import result
from tests.timing import ONE_THREAD

SUITE = """
import os, pathlib, time
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

PIDS = pathlib.Path(os.environ["RANK_PIDS"])


def _model():
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def _ddp_step(rank, fail=None):
    (PIDS / f"{os.getpid()}").write_text(str(rank))
    model = DDP(_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    calls = [0]

    def step():
        calls[0] += 1
        if fail is not None and rank == 1 and calls[0] > 3:
            fail()
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def build(rank, world_size):
    return _ddp_step(rank)


def _boom():
    raise RuntimeError("boom on purpose")


def build_raises(rank, world_size):
    return _ddp_step(rank, _boom)


def build_exits(rank, world_size):
    return _ddp_step(rank, lambda: os._exit(3))


def build_hangs(rank, world_size):
    return _ddp_step(rank, lambda: time.sleep(3600))


@pytest.mark.perfguard(variants=["eager"])
def test_ddp(perfguard):
    perfguard.distributed(build, world_size=2)


@pytest.mark.perfguard(variants=["eager"])
def test_raises(perfguard):
    perfguard.distributed(build_raises, world_size=2)


@pytest.mark.perfguard(variants=["eager"])
def test_exits(perfguard):
    perfguard.distributed(build_exits, world_size=2)


@pytest.mark.perfguard(variants=["eager"], timeout_s=7)
def test_hangs(perfguard):
    perfguard.distributed(build_hangs, world_size=2)


@pytest.mark.perfguard(variants=["eager"])
def test_too_wide(perfguard):
    perfguard.distributed(build, world_size=512)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and ") Z " in stat.read_text())  # a zombie has ended


def _session(repo: Path, pids: Path, *args: str) -> dict[str, dict[str, Any]]:
    out = repo / "out.json"
    done = forkserver.run_pytest(
        repo,
        "-q",
        "-p",
        "no:cacheprovider",
        "--perfguard",
        "--perfguard-device=cpu",
        ONE_THREAD,
        "--perfguard-budget=0.3",
        "--perfguard-repeats=3",
        f"--perfguard-json={out}",
        *args,
        env={**os.environ, "RANK_PIDS": str(pids)},
    )
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    run = json.loads(out.read_text())
    return {r["test"].split("::")[-1]: r for r in run["results"]}


@pytest.mark.slow
def test_a_ddp_step_is_timed_as_its_slowest_rank_and_its_ranks_failures_are_named(
    tmp_path: Path,
) -> None:
    repo, pids = tmp_path / "repo", tmp_path / "pids"
    repo.mkdir()
    pids.mkdir()
    (repo / "test_dist.py").write_text(SUITE)
    (repo / "pytest.ini").write_text("[pytest]\n")
    found = _session(repo, pids, "--perfguard-compare=none")

    ok = found["test_ddp"]
    assert ok["status"] == "ok" and ok["workload"] == "distributed"
    details = ok["details"]
    assert details["world_size"] == 2 and details["backend"] == "gloo"
    # each sample is the slowest rank's: its median is no lower than either rank's
    assert ok["metrics"]["latency_p50_ms"] >= max(details["rank_p50_ms"]) * 0.999
    assert ok["metrics"]["peak_memory_bytes"] == max(details["peak_memory_bytes_per_rank"])
    assert all(0 < share <= 1 for share in details["collective_share"])
    assert details["imbalance_p50"] >= 1.0
    assert any(op.startswith("c10d::") for op in details["profile"]["self_us"])
    assert ok["drift_check"]["passed"]

    assert found["test_raises"]["status"] == "error"
    assert "rank 1: RuntimeError: boom on purpose" in found["test_raises"]["error"]
    assert found["test_exits"]["status"] == "error"
    assert "rank 1 exited (exit code 3)" in found["test_exits"]["error"]
    hung = found["test_hangs"]
    # rank 0 waits in the all-reduce for rank 1, which sleeps: both are named, each where
    # it is stuck, within the item's limit (the item's own alarm never fires)
    assert hung["status"] == "error" and "did not finish step" in hung["error"]
    assert "within the item's time limit" in hung["error"]
    assert "rank 1 at test_dist.py:" in hung["error"] and "in <lambda>" in hung["error"]
    assert found["test_too_wide"]["status"] == "skipped"
    assert "world_size 512 needs a CPU core a rank" in found["test_too_wide"]["error"]

    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) >= 8  # two ranks of each of the four items that ran
    assert not [pid for pid in started if _alive(pid)], "a rank process outlived its item"


@pytest.mark.slow
def test_a_ddp_step_is_compared_in_same_job_ab(tmp_path: Path) -> None:
    repo, pids = tmp_path / "repo", tmp_path / "pids"
    repo.mkdir()
    pids.mkdir()
    (repo / "test_dist.py").write_text(SUITE)
    (repo / "pytest.ini").write_text("[pytest]\n")
    for command in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base"],
    ):
        subprocess.run(command, cwd=repo, check=True)
    found = _session(repo, pids, "--perfguard-ab=HEAD", "--perfguard-confirm=0", "-k", "test_ddp")
    ok = found["test_ddp"]
    assert ok["status"] == "ok" and ok["details"]["ab"]["pairs"] >= 6
    run = json.loads((repo / "out.json").read_text())
    assert run["baseline"]["mode"] == "ab"
    assert [r["status"] for r in run["baseline_results"]] == ["ok"]
    p50 = [c for c in run["comparisons"] if c["metric"] == "latency_p50_ms"]
    assert p50 and p50[0]["verdict"] in ("unchanged", "inconclusive", "regression", "improvement")
    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) >= 4 and not [pid for pid in started if _alive(pid)]  # 2 ranks a side


def test_a_build_no_rank_can_load_or_a_world_without_ranks_is_refused_by_name() -> None:
    settings = MeasureSettings()
    with pytest.raises(TypeError, match="top level of a module"):
        DistributedJob.of(lambda rank, world: None, 2, None, settings)
    with pytest.raises(TypeError, match="world_size must be a whole number"):
        DistributedJob.of(unhostable, 0, None, settings)
    with pytest.raises(TypeError, match="backend must be one of"):
        DistributedJob.of(unhostable, 2, "mpi", settings)


def test_a_world_the_machine_cannot_host_is_named() -> None:
    assert unhostable(1, "gloo", "cpu") is None
    assert "needs a CPU core a rank" in (unhostable(10_000, "gloo", "cpu") or "")
    cuda = unhostable(2, "nccl", "cpu") or ""
    assert "nccl needs CUDA" in cuda


def test_a_stuck_rank_is_named_with_the_line_its_main_thread_is_on() -> None:
    dump = (
        "Thread 0x00007f01 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
        "\n"
        "Current thread 0x00007f00 (most recent call first):\n"
        '  File "/x/site-packages/torch/autograd/graph.py", line 979 in _engine_run_backward\n'
        '  File "/x/site-packages/perfguard/measure/distributed.py", line 500 in rank_loop\n'
        '  File "/x/site-packages/perfguard/measure/distributed.py", line 470 in rank_main\n'
    )
    assert innermost_line(dump) == "torch/autograd/graph.py:979 in _engine_run_backward"
    assert innermost_line("") is None


def test_a_regression_of_a_step_names_its_collectives_first() -> None:
    def step(center_ms: float, *shares: float) -> Any:
        share = sum(shares) / len(shares)
        r = result("t::ddp", "eager", center_ms)
        details = dataclasses.replace(
            r.details,
            profile={"calls": 1, "self_us": {"c10d::allreduce_": share * center_ms * 1000}},
            build={"world_size": 2, "collective_share": list(shares)},
        )
        return dataclasses.replace(r, details=details)

    # rank 1 a straggler: rank 0 waits for it inside the all-reduce
    rows = why_of(step(10.0, 0.2, 0.2), step(14.0, 0.6, 0.2))
    name, base_us, head_us = rows[0]
    assert name == (
        "collectives (20% of the step, now 40%; ranks' work, busiest over idlest 1.00x, now 2.00x)"
    )
    assert base_us == pytest.approx(0.2 * 10.0 * 1000, rel=0.1)
    assert head_us == pytest.approx(0.4 * 14.0 * 1000, rel=0.1)
    assert rows[1][0] == "c10d::allreduce_"


def test_the_ranks_share_a_cpus_cores_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfguard.measure.distributed import rank_threads

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    job = DistributedJob.of(unhostable, 4, "gloo", MeasureSettings(), test="t", variant="eager")
    assert rank_threads(job, "cpu") == 4 and rank_threads(job, "cuda") is None
    told = DistributedJob.of(
        unhostable, 4, "gloo", MeasureSettings(threads=1), test="t", variant="eager"
    )
    assert rank_threads(told, "cpu") == 1


CUDA_SUITE = """
import pytest
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def build(rank, world_size):
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(2048, 2048).cuda(), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 2048, device="cuda")

    def step():
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    return step


@pytest.mark.perfguard(variants=["eager"])
def test_ddp(perfguard):
    perfguard.distributed(build, world_size=torch.cuda.device_count())
"""


@pytest.mark.cuda
def test_a_ddp_step_on_nccl_cuda_spans_every_gpu_of_the_machine(tmp_path: Path) -> None:
    import torch

    repo, pids = tmp_path / "repo", tmp_path / "pids"
    repo.mkdir()
    pids.mkdir()
    (repo / "test_dist.py").write_text(CUDA_SUITE)
    (repo / "pytest.ini").write_text("[pytest]\n")
    found = _session(repo, pids, "--perfguard-compare=none", "--perfguard-device=cuda")
    ok = found["test_ddp"]
    assert ok["status"] == "ok", ok.get("error")
    details = ok["details"]
    assert details["backend"] == "nccl" and details["world_size"] == torch.cuda.device_count()
    assert details["clock"].startswith("ranks_slowest (cuda")
    assert ok["metrics"]["peak_memory_bytes"] == max(details["peak_memory_bytes_per_rank"]) > 0
    assert all(0 <= share <= 1 for share in details["collective_share"])
