"""The record of what each perf test ran, end to end: one full run of a zoo whose tests reach
their models every way real suites do (`benchmarks/reach_suite.py`), then every pattern's
slowing change judged against that record: its test is measured, and a change no test can
feel measures nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import reach_suite
from perfguard.records.reach import Reach
from perfguard.selection import PerfTest, changed_files, decide
from tests.gitrepo import git

RECORD = (
    "--perfguard",
    "--perfguard-full",
    "--perfguard-compare=none",
    "--perfguard-device=cpu",
    "--perfguard-threads=1",
    "--perfguard-budget=0.02",
    "--perfguard-repeats=2",
    "--perfguard-confirm=0",
    "-p",
    "no:cacheprovider",
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Reach]:
    """The zoo, committed, and the record its full run made (a fresh interpreter, with the
    zoo's sitecustomize.py on its path as a runner's checkout has it)."""
    import subprocess
    import sys

    repo = tmp_path_factory.mktemp("zoo")
    reach_suite.write(repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "zoo")
    env = {**__import__("os").environ, "PYTHONPATH": str(repo)}
    env.pop("GITHUB_EVENT_NAME", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *RECORD, "--perfguard-json=base.json"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    doc = json.loads((repo / "base.json").read_text())
    assert len(doc["results"]) == len({test for _, _, test in reach_suite.SLOWER.values()}) + 1
    return repo, git(repo, "rev-parse", "HEAD"), Reach.from_json(doc["reach"])


def judge(repo: Path, base: str, reach: Reach) -> dict[str, str] | str:
    tests = {
        test: PerfTest(
            repo / test.split("::")[0],
            ("data/shared.txt",) if "declared" in test and "un" not in test else (),
        )
        for test in reach.tests
    }
    d = decide(repo, changed_files(repo, base), tests, reach=reach)
    return d.reason if d.full else dict(d.reached)


@pytest.mark.slow
def test_every_perf_test_of_the_zoo_has_a_record(recorded: tuple[Path, str, Reach]) -> None:
    _, _, reach = recorded
    expected = {test for _, _, test in reach_suite.SLOWER.values()}
    assert expected <= set(reach.tests)
    # the record is of repository code only, and small
    assert not any("site-packages" in path for path, _ in reach.files)
    size = len(json.dumps(reach.to_json()))
    assert size < 2000 * len(reach.tests), size


@pytest.mark.slow
@pytest.mark.parametrize("pattern", list(reach_suite.SLOWER))
def test_a_slower_model_is_measured_however_its_test_reaches_it(
    recorded: tuple[Path, str, Reach], pattern: str
) -> None:
    repo, base, reach = recorded
    path, edit, test = reach_suite.SLOWER[pattern]
    reach_suite.apply(repo, path, edit)
    try:
        reached = judge(repo, base, reach)
    finally:
        git(repo, "checkout", "-q", "--", ".")
    assert isinstance(reached, dict), reached
    assert test in reached, (pattern, reached)
    if path.endswith(".py") and path != "sitecustomize.py":
        assert set(reached) == {test}, (pattern, reached)  # and no other test


@pytest.mark.slow
@pytest.mark.parametrize("change", list(reach_suite.UNRELATED))
def test_a_change_no_test_can_feel_measures_nothing(
    recorded: tuple[Path, str, Reach], change: str
) -> None:
    repo, base, reach = recorded
    path, edit = reach_suite.UNRELATED[change]
    reach_suite.apply(repo, path, edit)
    try:
        assert judge(repo, base, reach) == {}
    finally:
        git(repo, "checkout", "-q", "--", ".")


TRACED = """
import sys

import pytest
import torch
from torch import nn

CALLS = []


def recording():  # perfguard's recorder: the profile hook, or a sys.monitoring tool
    if sys.version_info >= (3, 12):
        return any(sys.monitoring.get_events(tool) for tool in (3, 4))
    return sys.getprofile() is not None


class Watched(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x):
        CALLS.append(recording())
        return self.l(x)


@pytest.mark.perfguard(variants=["eager"])
def test_watched(perfguard):
    perfguard.run(Watched().eval(), (torch.randn(2, 8),))
    traced = [i for i, t in enumerate(CALLS) if t]
    # the untimed call (the eager reference) was recorded; nothing after it ran traced
    assert traced and traced == list(range(len(traced))), CALLS
    assert len(CALLS) > len(traced) + 10
"""


@pytest.mark.slow
def test_recording_traces_the_untimed_call_and_never_a_measured_one(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_watched=TRACED)
    result = pytester.runpytest_subprocess(*RECORD, "--perfguard-json=out.json")
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert "test_watched.py::test_watched" in doc["reach"]["tests"]
    # and a session that does not record leaves every call alone
    result = pytester.runpytest_subprocess(*RECORD, "--perfguard-record=no")
    assert result.ret == 1  # the test's own assertion: nothing was traced
    assert "assert ([])" in result.stdout.str()
