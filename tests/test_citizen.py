"""perfguard in a team's whole test environment: free when not asked for, beside pytester,
pytest-benchmark (in A/B too) and a user's own fixture named `perfguard`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.gitrepo import git
from tests.test_plugin import FAST

LOADED = """
import sys

def test_nothing_of_perfguard_is_loaded():
    heavy = ("numpy", "torch", "perfguard.records", "perfguard.stats", "perfguard.store.baselines")
    found = [m for m in heavy if m in sys.modules]
    assert not found, found
    assert "perfguard.pytest_plugin" in sys.modules  # installed, so loaded: and light
"""


@pytest.mark.slow
@pytest.mark.fresh_interpreter
def test_without_perfguard_a_session_imports_no_numpy_torch_or_records(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_light=LOADED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:benchmark")
    assert result.ret == 0, result.stdout.str()


PYTESTER_SUITE = """
pytest_plugins = ["pytester"]

def test_one(pytester):
    pytester.makepyfile("def test_a():\\n    pass\\n")
    pytester.runpytest().assert_outcomes(passed=1)

def test_two(pytester):
    pytester.makepyfile("def test_b():\\n    pass\\n")
    pytester.runpytest().assert_outcomes(passed=1)
"""


@pytest.mark.slow
@pytest.mark.fresh_interpreter
def test_a_pytester_suite_passes_with_perfguard_switched_off(tmp_path: object) -> None:
    """pytester's in-process sessions load perfguard (it is installed) and drop what they
    imported after each: had perfguard imported numpy, the second could not load it again."""
    import pathlib

    folder = pathlib.Path(str(tmp_path))
    (folder / "test_suite.py").write_text(PYTESTER_SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:perfguard", "-p", "no:cacheprovider",
         "-p", "no:benchmark", "test_suite.py"],
        cwd=folder, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout


OWN_FIXTURE = """
import pytest

@pytest.fixture
def perfguard():
    return "the team's own"

def test_uses_its_own(perfguard):
    assert perfguard == "the team's own"
"""


@pytest.mark.slow
@pytest.mark.parametrize("flags", [(), ("--perfguard", "--perfguard-compare=none")])
def test_a_users_own_fixture_named_perfguard_wins(
    pytester: pytest.Pytester, flags: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_own=OWN_FIXTURE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *flags)
    assert result.ret in (0, 5) or "passed" in result.stdout.str(), result.stdout.str()
    result.assert_outcomes(passed=1)


BENCH = """
import time

def test_sleeps(benchmark):
    benchmark.pedantic(time.sleep, args=({seconds},), rounds=30, iterations=1)
"""


@pytest.mark.slow
def test_a_benchmark_test_is_measured_in_both_trees_in_a_b_and_a_2x_slowdown_flagged(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile(test_bench=BENCH.format(seconds=0.002))
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    pytester.makepyfile(test_bench=BENCH.format(seconds=0.004))
    git(pytester.path, "commit", "-qam", "twice as slow")
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json"
    )
    assert result.ret == 1, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [r["variant"] for r in doc["results"]] == ["pytest-benchmark"]
    assert [r["variant"] for r in doc["baseline_results"]] == ["pytest-benchmark"]
    p50 = next(c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms")
    assert p50["test"] == "test_bench.py::test_sleeps" and p50["verdict"] == "regression"
    assert 60 < p50["change_pct"] < 140, p50


PERF_AND_BENCH = """
import time
import pytest, torch

@pytest.mark.perfguard(variants=["eager", "amp-bf16"])  # two variants, neither compiled
def test_both(perfguard, benchmark):
    perfguard.run(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    benchmark.pedantic(time.sleep, args=(0.001,), rounds=10, iterations=1)
"""


@pytest.mark.slow
def test_a_perf_test_that_also_times_itself_keeps_each_variants_benchmark_in_a_b(
    pytester: pytest.Pytester,
) -> None:
    """Both fixtures in one test: the perf item of each variant and its own benchmark's
    timings, one per variant, on both sides; and no warning that the driver never used it."""
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile(test_both=PERF_AND_BENCH)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD", "--perfguard-json=out.json",
        "--perfguard-full", "--perfguard-confirm=0",
    )  # fmt: skip
    out = result.stdout.str()
    assert "was not used" not in out, out
    doc = json.loads((pytester.path / "out.json").read_text())
    keys = sorted((r["test"], r["variant"]) for r in doc["results"])
    assert ("test_both.py::test_both[eager]", "pytest-benchmark") in keys, keys
    assert ("test_both.py::test_both[amp-bf16]", "pytest-benchmark") in keys, keys
    assert ("test_both.py::test_both", "eager") in keys and len(keys) == 4, keys
    base = sorted((r["test"], r["variant"]) for r in doc["baseline_results"])
    assert base == keys


@pytest.mark.slow
def test_benchmark_only_beside_perfguard_is_a_usage_error_not_a_silent_skip(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile(
        test_m="""
import pytest, torch

@pytest.mark.perfguard(variants=["eager"])
def test_m(perfguard):
    perfguard.run(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
"""
    )
    result = pytester.runpytest_subprocess(
        "--perfguard", "--benchmark-only", "-p", "no:cacheprovider", "--perfguard-json=out.json"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "the 1 perf item(s) would not be measured" in result.stderr.str()
    # refused before anything ran: no "incomplete run", no results file with that gap
    assert "incomplete run" not in result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "out.json").exists()


@pytest.mark.slow
def test_a_perf_test_that_fails_after_measuring_is_no_ok_result_nor_a_baseline(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_m="""
import pytest, torch

@pytest.mark.perfguard(variants=["eager"])
def test_m(perfguard):
    perfguard.run(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    assert False, "its own check"
"""
    )
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-save", "--perfguard-json=out.json"
    )
    assert result.ret == 1
    doc = json.loads((pytester.path / "out.json").read_text())
    [r] = doc["results"]
    assert r["status"] == "error" and "failed after measuring" in r["error"]
    assert "its own check" in r["error"]
