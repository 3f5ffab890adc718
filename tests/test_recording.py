"""The record sees all the work it stands for, and keeps out of what it does not: a
distributed step's ranks, an optimizer's step, a TorchScript module's source, a test that
starts a process, a profiler that takes the hook, a coverage session beside it, and the
tests that are no perf items."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from perfguard.records.reach import Reach

RECORD = (
    "--perfguard",
    "--perfguard-full",
    "--perfguard-compare=none",
    "--perfguard-device=cpu",
    "--perfguard-threads=1",
    "--perfguard-budget=0.02",
    "--perfguard-repeats=2",
    "--perfguard-confirm=0",
    "--perfguard-json=out.json",
    "-p",
    "no:cacheprovider",
)

MODELS = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.l(x))


class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        return super().step(closure)
"""


def _reach(path: Path) -> Reach:
    doc = json.loads((path / "out.json").read_text())
    assert doc.get("reach"), doc.get("reach")
    return Reach.from_json(doc["reach"])


def _blocks(reach: Reach, test: str) -> set[str]:
    footprint = reach.tests[test]
    return {f"{reach.block(i)[0]}: {reach.block(i)[1]}" for i in footprint.blocks}


def _files(reach: Reach, test: str) -> set[str]:
    return {reach.file(i) for i in reach.tests[test].files}


@pytest.mark.slow
def test_a_training_steps_optimizer_and_a_scripted_model_are_in_the_record(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(mymodels=MODELS)
    pytester.makepyfile(
        test_work="""
import pytest, torch
from mymodels import Net, SlowSGD

@pytest.mark.perfguard(variants=["eager"])
def test_train(perfguard):
    perfguard.train_step(Net(), (torch.randn(4, 8),), loss_fn=lambda out: out.sum(),
                         optimizer=lambda p: SlowSGD(p, lr=0.1))

@pytest.mark.perfguard(variants=["eager"])
def test_scripted(perfguard):
    perfguard.run(torch.jit.script(Net()), (torch.randn(4, 8),))
"""
    )
    result = pytester.runpytest_subprocess(*RECORD)
    assert result.ret == 0, result.stdout.str()
    reach = _reach(pytester.path)
    # the optimizer's step runs only in a whole step, never in the first loss and gradients
    assert "mymodels.py: SlowSGD.step" in _blocks(reach, "test_work.py::test_train")
    # TorchScript runs forward where no tracer sees: its source is a whole-file dependency
    assert "mymodels.py" in _files(reach, "test_work.py::test_scripted")
    # the packages each test ran: torch, and not perfguard's machinery (its jinja2, pytest)
    ran = reach.tests["test_work.py::test_train"].distributions
    assert "torch" in ran and not {"jinja2", "pytest", "perfguard", "pluggy"} & ran, ran


@pytest.mark.slow
def test_a_distributed_steps_ranks_record_what_they_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(mymodels=MODELS)
    pytester.makepyfile(
        test_dist="""
import pytest, torch
from mymodels import Net

def build(rank, world_size):
    torch.manual_seed(0)
    model, x = Net(), torch.randn(4, 8)
    return lambda: model(x)

@pytest.mark.perfguard(variants=["eager"])
def test_step(perfguard):
    perfguard.distributed(build, world_size=2)
"""
    )
    result = pytester.runpytest_subprocess(*RECORD)
    assert result.ret == 0, result.stdout.str()
    blocks = _blocks(_reach(pytester.path), "test_dist.py::test_step")
    assert {"mymodels.py: Net.forward", "test_dist.py: build"} <= blocks, blocks


@pytest.mark.slow
def test_a_test_that_starts_a_process_has_no_record_and_others_are_not_slowed(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(mymodels=MODELS)
    pytester.makepyfile(
        test_mixed="""
import subprocess, sys
import pytest, torch
from mymodels import Net

@pytest.mark.perfguard(variants=["eager"])
def test_calls_out(perfguard):
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    perfguard.run(Net(), (torch.randn(4, 8),))

@pytest.mark.perfguard(variants=["eager"])
def test_plain(perfguard):
    perfguard.run(Net(), (torch.randn(4, 8),))

def test_not_a_perf_test():
    # a test that is no perf item runs with no recording hook at all
    if sys.version_info >= (3, 12):
        assert not any(sys.monitoring.get_events(tool) for tool in (3, 4))
    else:
        assert sys.getprofile() is None
"""
    )
    result = pytester.runpytest_subprocess(*RECORD)
    assert result.ret == 0, result.stdout.str()
    reach = _reach(pytester.path)
    assert "test_mixed.py::test_plain" in reach.tests
    assert "test_mixed.py::test_calls_out" not in reach.tests  # always measured


@pytest.mark.slow
def test_a_profiler_that_takes_the_hook_while_recording_refuses_the_record(
    pytester: pytest.Pytester,
) -> None:
    if sys.version_info >= (3, 12):
        pytest.skip("3.12 records through sys.monitoring, which another profiler does not take")
    pytester.makepyfile(mymodels=MODELS)
    pytester.makepyfile(
        test_profiled="""
import sys
import pytest, torch
from mymodels import Net

@pytest.fixture(autouse=True)
def profiled():
    sys.setprofile(lambda frame, event, arg: None)  # a profiling plugin's hook
    yield

@pytest.mark.perfguard(variants=["eager"])
def test_net(perfguard):
    perfguard.run(Net(), (torch.randn(4, 8),))
"""
    )
    result = pytester.runpytest_subprocess(*RECORD)
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc.get("reach") is None  # refused: the next pull request measures everything
    assert "replaced the recording" in result.stdout.str()


@pytest.mark.slow
@pytest.mark.fresh_interpreter
def test_a_coverage_session_beside_the_recording_leaves_both_whole(
    pytester: pytest.Pytester,
) -> None:
    """Under `coverage run` (as pytest-cov runs one): the record is made, coverage sees the
    tests' lines, and no timed call runs under coverage's tracer."""
    pytester.makepyfile(mymodels=MODELS)
    pytester.makepyfile(
        test_covered="""
import sys
import pytest, torch
from mymodels import Net

SEEN = []

class Watched(Net):
    def forward(self, x):
        SEEN.append(sys.gettrace() is not None)
        return super().forward(x)

@pytest.mark.perfguard(variants=["eager"])
def test_net(perfguard):
    perfguard.run(Watched(), (torch.randn(4, 8),))
    # coverage traced the calls before measuring (the references, the record's whole
    # calls), and none of measuring's own (warm-up, timed blocks, memory, drift)
    first = SEEN.index(False)
    assert first >= 1 and not any(SEEN[first:]) and len(SEEN) - first >= 5, SEEN
"""
    )
    result = pytester.run(
        sys.executable, "-m", "coverage", "run", "--data-file=.cov", "-m", "pytest", *RECORD
    )
    assert result.ret == 0, result.stdout.str()
    reach = _reach(pytester.path)
    assert "mymodels.py: Net.forward" in _blocks(reach, "test_covered.py::test_net")
    report = pytester.run(sys.executable, "-m", "coverage", "report", "--data-file=.cov")
    assert "mymodels.py" in report.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["environment"]["tracer"] is None  # coverage was paused while timing
