"""Same-job A/B (`--perfguard-ab`) end to end, in scratch repositories whose base and head
differ by real extra compute; plus the paired statistics and on-demand sampling it rests on."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from perfguard.measure.clock import FakeClock
from perfguard.measure.sampling import SamplingSettings, sample_on_demand
from perfguard.records import Run, VariantResult
from perfguard.stats.sequential import LOOKS
from perfguard.stats.significance import paired_cohens_d, paired_min_detectable_pct, paired_t_test
from perfguard.stats.verdicts import Thresholds, compare_runs
from tests.factories import from_blocks
from tests.gitrepo import git
from tests.timing import ONE_THREAD

# on the CPU, also on a GPU box: the "extra compute" sizes are CPU-sized (launch-bound on a GPU)
FAST = (
    "--perfguard-device=cpu",
    ONE_THREAD,
    "--perfguard-budget=0.3",
    "--perfguard-repeats=5",
    "-p",
    "no:cacheprovider",
)
LEAST = ("--perfguard-budget=0.05", "--perfguard-repeats=2", "--perfguard-confirm=0")
"""After FAST, for a session whose latency verdict is not the point: the least sampling and no
confirmation (such a session may still read noise as a change: it asserts no exit code that a
verdict sets)."""

MODELS = """
import torch
from torch import nn

DEPTH = {depth}

def mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(128, 128), nn.ReLU()]
    return nn.Sequential(*layers).eval(), (torch.randn(32, 128),)
"""

TESTS = """
import pytest
from mymodels import mlp

@pytest.mark.perfguard(variants=["eager"], ab_min_change_pct={bar})
def test_mlp(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)

def test_plain():
    assert True
"""

NEW_TEST = """
import pytest
from mymodels import mlp

@pytest.mark.perfguard(variants=["eager"])
def test_added(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)
"""


def scratch_repo(pytester: pytest.Pytester, base_depth: int, head_depth: int, bar: float) -> str:
    """A repo with a base commit and a head commit; returns the base sha."""
    pytester.makepyfile(mymodels=MODELS.format(depth=base_depth))
    pytester.makepyfile(test_models=TESTS.format(bar=bar))
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    base = git(pytester.path, "rev-parse", "HEAD")
    pytester.makepyfile(mymodels=MODELS.format(depth=head_depth))
    git(pytester.path, "commit", "-q", "--allow-empty", "-am", "head")
    return base


def worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list").splitlines() if line]


@pytest.mark.slow
@pytest.mark.realtime
def test_real_extra_compute_is_a_regression_found_in_the_same_job(
    pytester: pytest.Pytester,
) -> None:
    base = scratch_repo(pytester, base_depth=4, head_depth=12, bar=5)
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json"
    )
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["baseline"]["commit"] == base
    assert doc["baseline"]["mode"] == "ab"
    assert "same-job A/B" in doc["baseline"]["reason"]
    [base_result] = doc["baseline_results"]
    [head_result] = doc["results"]
    # three times the layers: decided at a look of the sequential design (the first one on
    # an idle host; a busy one scatters the pairs and takes more)
    ab = head_result["details"]["ab"]
    assert ab["pairs"] in LOOKS and ab["sequential"]["stopped_at"] == ab["pairs"]
    assert ab["sequential"]["latency_p50_ms"]["verdict"] == "regression"
    orders = ab["order"].split()
    assert len(orders) == ab["pairs"] and set(orders) <= {"AB", "BA"}
    p50 = next(c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms")
    assert p50["verdict"] == "regression"
    assert p50["baseline"] == base_result["metrics"]["latency_p50_ms"]
    assert p50["change_pct"] > 50  # three times the layers
    assert p50["p_value"] < 0.05 and p50["cohens_d"] > 0
    assert {"kind": "paired_sequential", "pairs": ab["pairs"]}.items() <= p50["reasons"][0].items()
    # then measured again by a fresh pair of processes beside the base commit (shown again;
    # on a busy host the round may be too disturbed to say, and the verdict then stays)
    assert doc["settings"]["confirm"] == 1 and len(doc["confirm_results"]) == 1
    assert p50["confirmation"]["kind"] in ("shown", "unconfirmed")
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "**Same-job A/B:**" in report and "two paired tests" in report
    assert "twice that for p95 and p99" in report  # the tails' bar (stats.latency.ab_bar)
    assert len(worktrees(pytester.path)) == 1  # the base worktree was removed


@pytest.mark.slow
@pytest.mark.realtime  # real compute on both sides: "unchanged" holds by its 30% bar
def test_identical_trees_are_unchanged_and_a_new_test_is_new(pytester: pytest.Pytester) -> None:
    scratch_repo(pytester, base_depth=4, head_depth=4, bar=30)
    pytester.makepyfile(test_new=NEW_TEST)
    # the new test file is a change: a partial run would measure it alone
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD", "--perfguard-json=out.json", "--perfguard-full"
    )
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    verdicts = {(c["test"], c["metric"]): c["verdict"] for c in doc["comparisons"]}
    assert verdicts[("test_models.py::test_mlp", "latency_p50_ms")] == "unchanged"
    assert verdicts[("test_new.py::test_added", "latency_p50_ms")] == "new"


@pytest.mark.slow
def test_a_base_that_crashes_or_raises_loses_nothing_on_the_head_side(
    pytester: pytest.Pytester,
) -> None:
    """An item the base tree had and could not measure (it crashed, it raised) is no `new`
    test: it is a gap of the run, named with the base's error, and the run fails; the head's
    results are all kept."""
    pytester.makepyfile(mymodels=MODELS.format(depth=2))
    pytester.makepyfile(
        test_models="""
import json, os, pytest
from mymodels import mlp

@pytest.mark.perfguard(variants=["eager"])
def test_crash(perfguard):
    side = json.loads(os.environ.get("PERFGUARD_ORDERS", "{}")).get("side")
    if side == "A" and not os.path.exists("fixed"):
        os._exit(3)  # the base tree's process dies hard
    model, inputs = mlp()
    perfguard.run(model, inputs)

@pytest.mark.perfguard(variants=["eager"])
def test_raises(perfguard):
    if not os.path.exists("fixed"):
        raise RuntimeError("broken at the base")
    model, inputs = mlp()
    perfguard.run(model, inputs)

@pytest.mark.perfguard(variants=["eager"])
def test_fine(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)
"""
    )
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    (pytester.path / "fixed").write_text("")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "head")
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json"
    )
    assert result.ret == 1, result.stdout.str()  # not a pass: two items were not compared
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["*incomplete run: the base tree could not measure 2 perf item(s)*"]
    )
    doc = json.loads((pytester.path / "out.json").read_text())
    base = {r["test"]: r for r in doc["baseline_results"]}
    assert base["test_models.py::test_crash"]["status"] == "error"
    assert "worker exited" in base["test_models.py::test_crash"]["error"]
    assert base["test_models.py::test_raises"]["status"] == "error"
    assert "broken at the base" in base["test_models.py::test_raises"]["error"]
    assert {r["status"] for r in doc["results"]} == {"ok"}
    [gap] = [g for g in doc["incomplete"] if g["kind"] == "base_failed"]
    assert set(gap["items"]) == {
        "test_models.py::test_crash[eager]",
        "test_models.py::test_raises[eager]",
    }
    raises = next(
        c for c in doc["comparisons"]
        if c["test"] == "test_models.py::test_raises" and c["metric"] == "latency_p50_ms"
    )  # fmt: skip
    assert raises["verdict"] == "new" and "broken at the base" in raises["note"]
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "could not measure 2 perf item(s)" in report


@pytest.mark.slow
def test_the_workers_start_while_the_driver_still_collects(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driving session launches both workers before it collects: its own collection
    waits here (up to a minute) until both have started, which they could not do if they
    were launched after it. A path given that the base lacks leaves that tree's worker
    the paths it has."""
    scratch_repo(pytester, base_depth=2, head_depth=2, bar=30)
    pytester.makeconftest(
        """
import json, os, pathlib, time

def pytest_configure(config):
    side = json.loads(os.environ.get("PERFGUARD_ORDERS", "{}")).get("side")
    if side:  # a worker: say it started, where the driver can see it
        pathlib.Path(os.environ["SEEN_DIR"], side).write_text("")

def pytest_collection_finish(session):
    if json.loads(os.environ.get("PERFGUARD_ORDERS", "{}")).get("side"):
        return
    seen = pathlib.Path(os.environ["SEEN_DIR"])
    end = time.monotonic() + 60
    while time.monotonic() < end and len(list(seen.iterdir())) < 2:
        time.sleep(0.05)
    (seen.parent / "driver-saw.txt").write_text(" ".join(sorted(p.name for p in seen.iterdir())))
"""
    )
    pytester.makepyfile(test_new=NEW_TEST)
    git(pytester.path, "add", "conftest.py")
    git(pytester.path, "commit", "-q", "-m", "conftest")
    seen = pytester.path.parent / "seen"
    seen.mkdir()
    monkeypatch.setenv("SEEN_DIR", str(seen))
    result = pytester.runpytest_subprocess(
        *FAST,
        "--perfguard",
        "--perfguard-ab=HEAD",
        "--perfguard-json=out.json",
        "--perfguard-full",  # test_new.py is new: a partial run would measure it alone
        "test_models.py",
        "test_new.py",  # not in the base commit
    )
    assert result.ret == 0, result.stdout.str()
    assert (pytester.path.parent / "driver-saw.txt").read_text() == "A B"
    doc = json.loads((pytester.path / "out.json").read_text())
    verdicts = {(c["test"], c["metric"]): c["verdict"] for c in doc["comparisons"]}
    assert verdicts[("test_models.py::test_mlp", "latency_p50_ms")] == "unchanged"
    assert verdicts[("test_new.py::test_added", "latency_p50_ms")] == "new"


def test_session_paths_are_the_test_paths_relative_to_the_rootdir(tmp_path: Path) -> None:
    from types import SimpleNamespace
    from typing import cast

    from perfguard.pytest_plugin.ab.session import session_paths

    root = tmp_path / "repo"
    (root / "tests" / "perf").mkdir(parents=True)

    def config(here: Path, *args: str) -> pytest.Config:
        made = SimpleNamespace(
            rootpath=root, invocation_params=SimpleNamespace(dir=here), args=list(args)
        )
        return cast(pytest.Config, made)

    assert session_paths(config(root, str(root))) == ["."]
    assert session_paths(config(root / "tests", "perf/test_a.py::test_x[eager]", "..")) == [
        "tests/perf/test_a.py::test_x[eager]",
        ".",
    ]
    assert session_paths(config(root, str(tmp_path / "elsewhere"))) is None


def test_a_worker_started_early_waits_for_the_drivers_items() -> None:
    from multiprocessing import Pipe

    from perfguard.pytest_plugin.ab.worker import WorkerLink

    here, there = Pipe()
    with here, there:
        link = WorkerLink(here, "A", None)
        there.send({"kind": "items", "items": ["t.py::a[eager]", "t.py::b[eager]"]})
        assert link.items == ["t.py::a[eager]", "t.py::b[eager]"]
        assert link.items == ["t.py::a[eager]", "t.py::b[eager]"]  # asked once
        other = WorkerLink(here, "A", None)
        there.send({"kind": "go"})
        with pytest.raises(ValueError, match="'go' where items was due"):
            _ = other.items


def test_every_ab_message_round_trips_and_a_stray_one_is_named() -> None:
    from perfguard.pytest_plugin.ab import protocol as p

    messages = [
        p.Items(("t.py::a[eager]",)),
        p.Go(),
        p.Skip(),
        p.Time(),
        p.Block(slower_ms=0.25),
        p.Ops(),
        p.Finish(),
        p.Collected(("t.py::a[eager]",), cuda=None),
        p.Next("t.py::a[eager]"),
        p.Built(),
        p.Ready(repeats=5, warmup_calls=12, call_ms=1.5),
        p.Times((1.5, 1.25)),
        p.OpsTaken(places=12),
        p.Result("t.py::a[eager]", {"test": "t.py::a"}, {"torch": "2.13.0"}),
        p.Ended("t.py::a[eager]", "passed", ""),
    ]
    assert {m.KIND for m in messages} == set(p.KINDS)  # each kind once
    for message in messages:
        assert p.decode(message.wire()) == message
    assert p.command(p.Go().wire()) == p.Go() and p.report(p.Built().wire()) == p.Built()
    with pytest.raises(p.ProtocolError, match="'built' is a worker's"):
        p.command(p.Built().wire())
    with pytest.raises(p.ProtocolError, match="'go' is the driver's"):
        p.report(p.Go().wire())
    with pytest.raises(p.ProtocolError, match="not an A/B message: 'hello'"):
        p.decode({"kind": "hello"})
    fields = r"'ready': expected fields \['call_ms', 'op_blocks', 'repeats'"
    with pytest.raises(p.ProtocolError, match=fields):
        p.decode({"kind": "ready", "repeats": 5})
    # a field with a default may be left out (a worker of an older tree sends no call time)
    assert p.decode({"kind": "ready", "repeats": 5, "warmup_calls": 3}) == p.Ready(5, 3)
    assert p.decode({"kind": "block"}) == p.Block()


def test_an_early_launch_with_none_of_the_paths_in_the_tree_starts_nothing(
    tmp_path: Path,
) -> None:
    from perfguard.pytest_plugin.ab.side import Side

    side = Side("A", "base", tmp_path, [], tmp_path / "base.log")
    with pytest.raises(FileNotFoundError, match=r"test_new\.py"):
        side.launch(None, ["test_new.py::test_added"])
    assert side.proc is None and not (tmp_path / "base.log").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--perfguard-ab=no-such-ref",), "--perfguard-ab:"),
        (("--perfguard-ab", "--perfguard-compare=HEAD"), "use one"),
    ],
)
def test_bad_ab_options_are_one_line_usage_errors(
    pytester: pytest.Pytester, args: tuple[str, ...], message: str
) -> None:
    scratch_repo(pytester, base_depth=2, head_depth=2, bar=5)
    result = pytester.runpytest_subprocess("--perfguard", *args, "test_models.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert len(worktrees(pytester.path)) == 1


# --- the statistics and sampling underneath ------------------------------------------


def test_paired_t_test_matches_scipy_on_log_ratios() -> None:
    a = [1.00, 1.10, 0.95, 1.30, 1.02, 0.99]
    b = [1.06, 1.15, 1.02, 1.37, 1.05, 1.08]
    t, p, df = paired_t_test(a, b)
    oracle = sps.ttest_rel(np.log(b), np.log(a))
    assert t == pytest.approx(oracle.statistic) and p == pytest.approx(oracle.pvalue)
    assert df == 5
    d = np.log(b) - np.log(a)
    assert paired_cohens_d(a, b) == pytest.approx(d.mean() / d.std(ddof=1) * (1 - 3 / 19))
    se = d.std(ddof=1) / math.sqrt(6)
    q = sps.t.ppf(0.975, 5) + sps.t.ppf(0.8, 5)
    assert paired_min_detectable_pct(a, b) == pytest.approx(100 * math.expm1(q * se))


def test_paired_edge_cases() -> None:
    assert paired_t_test([1.0, 2.0], [1.0, 2.0]) == (0.0, 1.0, 1.0)
    t, p, _ = paired_t_test([1.0, 2.0], [1.1, 2.2])  # a constant 10% ratio
    assert t == math.inf and p == 0.0
    with pytest.raises(ValueError, match="equal lengths"):
        paired_t_test([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="positive"):
        paired_t_test([1.0, 0.0], [1.0, 2.0])


def test_pairing_cancels_drift_that_welch_cannot() -> None:
    # the machine slows by 40% over the job; B is 6% slower than A in every pair
    drift = [1.0, 1.1, 1.2, 1.3, 1.4]
    a = [[2.0 * k] * 3 for k in drift]
    b = [[2.0 * k * 1.06] * 3 for k in drift]
    base = Run(commit=None, machine="m", environment={}, results=(from_blocks(a),))
    head = Run(commit=None, machine="m", environment={}, results=(from_blocks(b),))
    th = Thresholds()  # ab_min_change_pct 5, min_change_pct 10
    paired = {c.metric: c for c in compare_runs(base, head, th, paired=True)}
    welch = {c.metric: c for c in compare_runs(base, head, th)}
    assert paired["latency_p50_ms"].verdict == "regression"
    assert paired["latency_p50_ms"].p_value == 0.0  # exactly 6% in every pair
    assert welch["latency_p50_ms"].verdict == "unchanged"  # 6% < 10%, and drowned in drift
    assert (welch["latency_p50_ms"].p_value or 0.0) > 0.5


@pytest.mark.parametrize(
    ("ratio", "tails"), [(1.08, "unchanged"), (1.12, "regression"), (0.88, "improvement")]
)
def test_ab_tails_need_twice_the_bar(ratio: float, tails: str) -> None:
    # every percentile of every pair moves by `ratio`: the median needs 5%, p95 and p99 10%
    a = [[1.0 + 0.01 * i, 1.5, 2.0 + 0.01 * i] for i in range(6)]
    b = [[t * ratio for t in block] for block in a]
    base = Run(commit=None, machine="m", environment={}, results=(from_blocks(a),))
    head = Run(commit=None, machine="m", environment={}, results=(from_blocks(b),))
    found = {c.metric: c for c in compare_runs(base, head, Thresholds(), paired=True)}
    assert found["latency_p50_ms"].verdict == ("improvement" if ratio < 1 else "regression")
    assert found["latency_p95_ms"].verdict == tails
    assert found["latency_p99_ms"].verdict == tails
    assert found["latency_p95_ms"].min_detectable_pct == pytest.approx(10.0)


def test_sample_on_demand_samples_one_block_per_command() -> None:
    clock = FakeClock([1.0] * 500)
    settings = SamplingSettings(
        min_warmup=1,
        warmup_window=2,
        repeats=4,
        budget_s=0.04,
        rewarm_calls=0,
        min_samples_per_repeat=3,
    )
    commands = iter(["block", "block", "block", "finish"])
    said: list[str] = []
    handed: list[tuple[float, ...]] = []
    inside = [False]
    calls_inside: list[bool] = []

    @contextlib.contextmanager
    def around() -> Iterator[None]:
        said.append("pin")
        inside[0] = True
        yield
        inside[0] = False

    outcome = sample_on_demand(
        lambda: calls_inside.append(inside[0]),
        clock,
        settings,
        lambda _: None,
        ready=lambda w, s: said.append(f"ready {w.calls} {s.repeats}"),
        next_command=lambda: next(commands),
        hand_over=handed.append,
        around_block=around,
    )
    assert said == ["ready 4 4", "pin", "pin", "pin"]
    assert calls_inside == [False] * 4 + [True] * 30  # warm-up free, every timed call inside
    assert len(outcome.blocks_ms) == 3 and list(outcome.blocks_ms) == handed
    assert all(len(block) == 10 for block in handed)  # 40 ms budget / 4 repeats / 1 ms
    with pytest.raises(ValueError, match="unknown sampling command"):
        sample_on_demand(
            lambda: None,
            FakeClock([1.0] * 50),
            settings,
            lambda _: None,
            ready=lambda w, s: None,
            next_command=lambda: "dance",
            hand_over=handed.append,
        )


def test_merging_ab_shards_keeps_each_base_side(tmp_path: Path) -> None:
    from perfguard.records.merge import merge_runs

    one = from_blocks([[1.0, 1.1]])
    two = VariantResult(test="u", variant="eager", status="ok", samples_ms=(2.0,))
    shard1 = Run(
        commit="c" * 40, machine="m", environment={}, results=(one,), baseline_results=(one,)
    )
    shard2 = Run(
        commit="c" * 40, machine="m", environment={}, results=(two,), baseline_results=(two,)
    )
    merged = merge_runs([(tmp_path / "1.json", shard1), (tmp_path / "2.json", shard2)])
    assert [r.test for r in merged.baseline_results] == ["t", "u"]
    again = Run.from_json(json.loads(json.dumps(merged.to_json())))
    assert [r.test for r in again.baseline_results] == ["t", "u"]


LAZY_TESTS = """
import pytest

@pytest.mark.perfguard(variants=["eager"])
def test_lazy(perfguard):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).eval()
    perfguard.run(model, (torch.randn(8, 64),))
"""


@pytest.mark.slow
@pytest.mark.fresh_interpreter  # what the driving session imports
def test_the_driver_leaves_torch_to_its_workers(pytester: pytest.Pytester) -> None:
    """The driving session measures nothing: it learns whether `auto` means CUDA from its
    workers and reads their messages without importing torch (1-2 s of CPU while both
    workers start); a suite that imports torch only in its tests leaves it unimported."""
    pytester.makepyfile(test_lazy=LAZY_TESTS)
    pytester.makeconftest(
        """
import json, os, pathlib, sys

def pytest_unconfigure(config):
    if not json.loads(os.environ.get("PERFGUARD_ORDERS", "{}")).get("side"):
        pathlib.Path("driver-torch.txt").write_text(str("torch" in sys.modules))
"""
    )
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    result = pytester.runpytest_subprocess(
        *[a for a in FAST if not a.startswith("--perfguard-device")],
        "--perfguard",
        "--perfguard-ab=HEAD",
        "--perfguard-json=out.json",
    )
    assert result.ret == 0, result.stdout.str()
    assert (pytester.path / "driver-torch.txt").read_text() == "False"
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["environment"]["device_type"] == "cpu"
    [p50] = [c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms"]
    assert p50["verdict"] in ("unchanged", "inconclusive")


def test_the_environment_a_worker_sends_is_plain_data() -> None:
    """Unpickling it must not import torch in the driver (torch's version is a str
    subclass of torch's own)."""
    import torch

    from perfguard.environment import collect_environment

    def kinds(value: object) -> set[type]:
        if isinstance(value, dict):
            return {dict}.union(*(kinds(v) for v in value.values()))
        return {type(value)}

    plain = {dict, str, int, float, bool, type(None)}
    assert kinds(collect_environment(torch.device("cpu"))) <= plain


@pytest.mark.slow
def test_a_worker_ends_without_the_teardown_but_with_its_exit_handlers(tmp_path: Path) -> None:
    """`end_worker` exits with pytest's code, after the exit handlers and with the output
    flushed, and skips the interpreter's teardown only when no test thread still runs."""
    (tmp_path / "test_exit.py").write_text(
        """
import atexit, pathlib, threading, time

def test_fails():
    atexit.register(lambda: pathlib.Path("handler-ran").write_text("yes"))
    assert False

def test_leaves_a_thread(request):
    if not request.config.getoption("-k"):
        return
    def late():
        time.sleep(0.3)
        pathlib.Path("thread-ended").write_text("yes")
    threading.Thread(target=late).start()
""",
        encoding="utf-8",
    )
    boot = (
        "import sys, pytest; from perfguard.processes import end_worker; "
        "end_worker(int(pytest.main(sys.argv[1:])))"
    )

    def session(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", boot, "-q", "-p", "no:cacheprovider", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = session("test_exit.py")
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 passed" in done.stdout  # flushed before the exit
    assert (tmp_path / "handler-ran").read_text() == "yes"
    done = session("-k", "thread", "test_exit.py")
    assert done.returncode == 0, done.stdout
    assert (tmp_path / "thread-ended").read_text() == "yes"  # the exit waited for it


def test_the_driver_lets_both_workers_exit_before_it_waits(tmp_path: Path) -> None:
    """Both connections close first, then the driver waits for each: the two workers end
    at once rather than one after the other."""
    from perfguard.pytest_plugin.ab.driver import Driver

    driver = Driver(tmp_path, "base", tmp_path, lambda _root: [])
    calls: list[str] = []

    class FakeSide:
        def __init__(self, name: str) -> None:
            self.name = name

        def hang_up(self) -> None:
            calls.append(f"hang up {self.name}")

        def stop(self, *, at_once: bool = False) -> None:
            calls.append(f"wait {self.name}")

    driver.a, driver.b = FakeSide("A"), FakeSide("B")  # type: ignore[assignment]
    driver.close()
    assert calls == ["hang up A", "hang up B", "wait A", "wait B"]
