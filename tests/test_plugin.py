"""The pytest plugin end to end, through `pytester`: wiring, ids, precedence, exit codes, JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from perfguard.records import SCHEMA_VERSION, VariantResult
from tests.gitrepo import git
from tests.timing import ONE_THREAD, SCRIPTED_CLOCK

FAST = (
    "--perfguard-device=cpu",  # the expectations here are the CPU's, on a GPU box too
    ONE_THREAD,
    "--perfguard-budget=0.02",
    "--perfguard-repeats=3",
    "--perfguard-confirm-gap=0",  # a re-measure need not wait in tests
    "-p",
    "no:cacheprovider",
)

# Written only from the public interface (docs/reference.md), as a user would.
USER_SUITE = """
import pytest, torch

class MyEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
    def forward(self, x):
        return torch.relu(self.lin(x))

@pytest.mark.perfguard(variants=["eager", "int8-dynamic"])
def test_encoder(perfguard):
    model = MyEncoder().eval()
    x = torch.randn(8, 4, 16)
    perfguard.run(model, (x,))

def test_plain():
    assert 1 + 1 == 2
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*FAST, *args)


THREADS_SEEN = """
import pytest, torch
import perfguard.measure.drift as drift

seen = []
real = drift.compute_reference

def spy(*args, **kwargs):
    seen.append(torch.get_num_threads())
    return real(*args, **kwargs)

drift.compute_reference = spy

@pytest.mark.perfguard(variants=["eager"], threads=1)
def test_model(perfguard):
    torch.set_num_threads(2)
    result = perfguard.run(torch.nn.Linear(8, 8).eval(), (torch.randn(2, 8),))
    assert seen == [1]  # the reference sums in the order the measured calls do
    assert torch.get_num_threads() == 2
    assert result.drift_check.passed
"""


@pytest.mark.slow
def test_the_eager_reference_is_computed_with_the_measured_thread_count(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_threads=THREADS_SEEN)
    result = run(pytester, "--perfguard", "--perfguard-compare=none")
    assert result.ret == 0, result.stdout.str()


@pytest.mark.slow
def test_user_suite_measures_one_item_per_variant(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_SUITE)
    result = run(pytester, "--perfguard", "--perfguard-json", "out.json", "-v")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*test_user.py::test_encoder[[]eager[]] PASSED*",
            "*test_user.py::test_encoder[[]int8-dynamic[]] PASSED*",
            "*test_user.py::test_plain PASSED*",
            "*perfguard*",
            "*test_user.py::test_encoder*",
        ]
    )
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION == 15
    assert set(doc) >= {"commit", "machine", "environment", "baseline", "results", "comparisons"}
    assert doc["commit"] is None  # not a git checkout
    assert "not inside a git repository" in doc["baseline"]["reason"]
    assert {r["variant"] for r in doc["results"]} == {"eager", "int8-dynamic"}
    for r in doc["results"]:
        assert r["test"] == "test_user.py::test_encoder"
        assert r["status"] == "ok" and r["error"] is None
        m = r["metrics"]
        for key in (
            "latency_p50_ms",
            "latency_p95_ms",
            "latency_p99_ms",
            "latency_mean_ms",
            "peak_memory_bytes",
            "compile_time_s",
            "drift_max_abs",
            "drift_max_rel",
            "drift_cosine",
        ):
            assert key in m
        assert m["compile_time_s"] is None
        assert len(r["samples_ms"]) == m["latency_samples"]
    assert {c["verdict"] for c in doc["comparisons"]} == {"new"}
    assert (pytester.path / "reports" / "perfguard.md").is_file()


@pytest.mark.slow
def test_without_the_flag_perf_items_skip_and_plain_tests_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_SUITE)
    result = run(pytester, "-rs")
    assert result.ret == 0
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*SKIPPED*--perfguard*"])
    assert not (pytester.path / "reports").exists()


HEAP = """
import gc
import pytest, torch

COLLECTED = gc.get_freeze_count()  # what was frozen before this module was imported


@pytest.mark.perfguard(variants=["eager"])
def test_model(perfguard):
    perfguard.run(torch.nn.Linear(4, 4), (torch.randn(2, 4),))


def test_heap(request):
    frozen = gc.get_freeze_count() > COLLECTED  # this module's objects among them
    assert frozen == request.config.getoption("--perfguard")
"""


@pytest.mark.slow  # two pytest sessions
def test_a_measuring_session_takes_what_it_collected_out_of_the_collectors_walks(
    pytester: pytest.Pytester,
) -> None:
    """A full collection before each memory reading and after each variant walked every
    object torch and the test modules hold (most of a small model's measurement): once the
    tests are collected, a measuring session freezes them; a session without perfguard does
    not."""
    pytester.makepyfile(test_heap=HEAP)
    measured = pytester.runpytest_subprocess(*FAST, "--perfguard", "--perfguard-compare=none")
    measured.assert_outcomes(passed=2)
    plain = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    plain.assert_outcomes(passed=1, skipped=1)


SUITE_NO_VARIANTS = """
import pytest, torch

@pytest.mark.perfguard
def test_a(perfguard):
    pass

@pytest.mark.perfguard(variants=["int8-dynamic"])
def test_marked(perfguard):
    pass

@pytest.mark.parametrize("batch", [1, 4])
def test_params(perfguard, batch):
    pass
"""


def collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    result = pytester.runpytest_subprocess("--collect-only", "-q", *args)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    return [line for line in result.stdout.lines if "::" in line]


@pytest.mark.slow
def test_variant_precedence_default_ini_marker_command_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_p=SUITE_NO_VARIANTS)
    ids = collected(pytester)
    assert "test_p.py::test_a[eager]" in ids and "test_p.py::test_a[compile-default]" in ids
    assert (
        "test_p.py::test_marked[int8-dynamic]" in ids
        and len([i for i in ids if "test_marked" in i]) == 1
    )
    assert {"test_p.py::test_params[1-eager]", "test_p.py::test_params[4-compile-default]"} <= set(
        ids
    )

    pytester.makeini("[pytest]\nperfguard_variants = amp-bf16\n")
    ids = collected(pytester)
    assert "test_p.py::test_a[amp-bf16]" in ids  # ini over default
    assert "test_p.py::test_marked[int8-dynamic]" in ids  # marker over ini

    ids = collected(pytester, "--perfguard-variants=onnxruntime,eager")
    assert [i for i in ids if "test_marked" in i] == [  # command line over marker
        "test_p.py::test_marked[onnxruntime]",
        "test_p.py::test_marked[eager]",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (
            ("--perfguard-variants=eager,turbo",),
            "",
            "--perfguard-variants: unknown variant 'turbo'",
        ),
        ((), "perfguard_variants = fast", "ini perfguard_variants: unknown variant 'fast'"),
        (("--perfguard-fail-on=maybe",), "", "--perfguard-fail-on: must be one of"),
        (("--perfguard-budget=soon",), "", "--perfguard-budget: must be a number, got 'soon'"),
    ],
)
def test_bad_options_are_usage_errors_naming_their_source(
    pytester: pytest.Pytester, args: tuple[str, ...], ini: str, message: str
) -> None:
    pytester.makepyfile(test_user=USER_SUITE)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (
            'variants=["eager", "warp-speed"]',
            "test_m.py::test_x: @pytest.mark.perfguard: unknown variant 'warp-speed'",
        ),
        ("budget=3", "test_m.py::test_x: @pytest.mark.perfguard: unknown key 'budget'"),
        ('repeats="many"', "repeats: must be a whole number, got 'many'"),
        ("min_change_pct=5, alpha=2.0", "alpha: must be above 0 and below 1"),
        ("min_change_pct=-1", "min_change_pct: must be between 0 and 1000, got -1"),
    ],
)
def test_bad_markers_name_the_test_and_the_key(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        test_m=f"""
import pytest

@pytest.mark.perfguard({marker})
def test_x(perfguard):
    pass
"""
    )
    result = pytester.runpytest_subprocess()
    assert result.ret != 0
    assert message in result.stdout.str() + result.stderr.str()


@pytest.mark.slow
def test_a_model_that_raises_fails_its_item_and_others_go_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_r="""
import pytest, torch

class Broken(torch.nn.Module):
    def forward(self, x):
        raise ValueError("weights for layer 7 are missing")

@pytest.mark.perfguard(variants=["eager"])
def test_broken(perfguard):
    perfguard.run(Broken(), (torch.ones(2),))

@pytest.mark.perfguard(variants=["eager", "compile-reduce-overhead"])
def test_fine(perfguard):
    perfguard.run(torch.nn.Linear(4, 4).eval(), (torch.ones(2, 4),))
"""
    )
    result = run(pytester, "--perfguard", "--perfguard-json=out.json", "-rs")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*eager: ValueError: weights for layer 7 are missing*",
            "*SKIPPED*compile-reduce-overhead needs a CUDA device*",
        ]
    )
    doc = json.loads((pytester.path / "out.json").read_text())
    by_variant = {(r["test"].split("::")[1], r["variant"]): r for r in doc["results"]}
    broken = by_variant[("test_broken", "eager")]
    assert broken["status"] == "error" and "layer 7" in broken["error"]
    assert by_variant[("test_fine", "compile-reduce-overhead")]["status"] == "skipped"
    assert by_variant[("test_fine", "eager")]["status"] == "ok"


@pytest.mark.slow
def test_the_eager_reference_is_computed_once_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_SUITE)
    result = run(pytester, "--perfguard", "--perfguard-progress=yes", "-s")
    assert result.ret == 0
    lines = [line for line in result.stdout.lines if "eager reference" in line]
    assert len(lines) == 1 and "test_encoder[eager]" in lines[0]
    result.stdout.fnmatch_lines(["*test_encoder[[]int8-dynamic[]]: sampling (repeat 3/3)*"])


@pytest.mark.slow
def test_drift_beyond_tolerance_fails_the_item(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_d="""
import pytest, torch

@pytest.mark.perfguard(variants=["prune-l1-unstructured:0.9"], drift_tolerance=1e-6)
def test_pruned(perfguard):
    perfguard.run(torch.nn.Linear(32, 32).eval(), (torch.randn(4, 32),))
"""
    )
    result = run(pytester, "--perfguard")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*numerical drift beyond its tolerance class pruned*"])


@pytest.mark.slow
def test_xdist_is_refused_with_advice(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_user=USER_SUITE)
    result = pytester.runpytest_subprocess("--perfguard", "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot run under pytest-xdist" in result.stderr.str()
    without = pytester.runpytest_subprocess("-n", "1")  # no --perfguard: xdist is fine
    assert without.ret == 0


@pytest.mark.slow
def test_pytest_benchmark_tests_are_recorded(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile(
        test_b="""
def work():
    return sum(i * i for i in range(2000))

def test_sum(benchmark):
    assert benchmark(work) > 0
"""
    )
    result = run(pytester, "--perfguard", "--perfguard-json=out.json", "--benchmark-min-rounds=20")
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    (r,) = doc["results"]
    assert r["variant"] == "pytest-benchmark" and r["test"] == "test_b.py::test_sum"
    assert len(r["samples_ms"]) >= 20 and r["metrics"]["latency_p50_ms"] > 0
    result.stdout.fnmatch_lines(["*benchmark: 1 tests*", "*test_sum*"])  # its own table too


@pytest.mark.slow
def test_a_fixture_user_that_never_measures_is_warned(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_w="""
import pytest

@pytest.mark.perfguard(variants=["eager"])
def test_forgot(perfguard):
    pass
"""
    )
    result = run(pytester, "--perfguard")
    result.stdout.fnmatch_lines(["*never called perfguard.run*"])


# ---- baselines through git ------------------------------------------------------------------

SCALED = """
import pathlib, pytest, torch

WIDTH = pathlib.Path(__file__).with_name("width.txt")  # tracked: each commit has its own

@pytest.mark.perfguard(variants=["eager"])
def test_model(perfguard):
    width = int(WIDTH.read_text()) if WIDTH.exists() else 64
    model = torch.nn.Sequential(torch.nn.Linear(256, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 8)).eval()
    perfguard.run(model, (torch.randn(64, 256),))
"""


def commit_latency(repo: Path, ms: float) -> None:
    """Commit B: the scripted clock reads `ms` for each call of this commit's code."""
    (repo / "latency_ms.txt").write_text(str(ms))
    git(repo, "add", "latency_ms.txt")
    git(repo, "commit", "-q", "-m", "B")


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Path:
    pytester.makepyfile(test_scaled=SCALED)
    pytester.makeconftest(SCRIPTED_CLOCK)  # every session of this repository times by it
    pytester.path.joinpath(".gitignore").write_text("reports/\nout*.json\n__pycache__/\n")
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "A")
    return pytester.path


@pytest.mark.slow
def test_save_then_compare_finds_the_baseline_and_flags_a_regression(
    pytester: pytest.Pytester, repo: Path
) -> None:
    a = git(repo, "rev-parse", "HEAD")
    saved = run(pytester, "--perfguard", "--perfguard-save", "--perfguard-repeats=5")
    assert saved.ret == 0, saved.stdout.str()
    files = list((repo / "baselines").glob(f"*/{a}.json.gz"))
    assert len(files) == 1

    git(repo, "checkout", "-q", "-b", "feature")
    commit_latency(repo, 4.0)  # four times the base's 1 ms
    slower = run(pytester, "--perfguard", "--perfguard-json=out.json", "--perfguard-repeats=5")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED, slower.stdout.str()
    slower.stdout.fnmatch_lines(
        [f"*baseline: {a[:10]} (merge-base of HEAD with main*", "*regression found*"]
    )
    doc = json.loads((repo / "out.json").read_text())
    assert doc["baseline"]["commit"] == a
    p50 = next(c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms")
    assert p50["verdict"] == "regression" and 250 < p50["change_pct"] < 350
    assert p50["p_value"] < 0.05 and p50["cohens_d"] > 0
    assert p50["confirmation"]["kind"] == "shown"  # and again beside the base commit

    # (the exit code alone: no re-measure needed)
    never = run(
        pytester, "--perfguard", "--perfguard-fail-on=never", "--perfguard-repeats=5",
        "--perfguard-confirm=0",
    )  # fmt: skip
    assert never.ret == 0 and "regression found" in never.stdout.str()


@pytest.mark.slow
def test_a_slowdown_only_one_process_saw_is_withdrawn_by_the_re_measure(
    pytester: pytest.Pytester, repo: Path
) -> None:
    a2 = git(repo, "rev-parse", "HEAD")
    saved = run(pytester, "--perfguard", "--perfguard-save", "--perfguard-repeats=5")
    assert saved.ret == 0
    git(repo, "commit", "-q", "--allow-empty", "-m", "B")

    (repo / "slow-once").write_text("")  # this process runs slow (a noisy neighbour, say)
    # B is an empty commit: measured whole (a partial run would measure nothing)
    result = run(
        pytester, "--perfguard", "--perfguard-json=out.json", "--perfguard-repeats=5",
        "--perfguard-full",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"*confirming 1 flagged item(s) beside the base commit {a2[:10]} (A/B) (1 of 1): "
            "test_scaled.py::test_model[[]eager[]]*",
            # (p50, and p95 too unless other work on the host blurred its tail)
            "*confirmation: 1 flagged item(s) re-measured once beside the base commit "
            "(same-job A/B): 0 gating latency verdict(s) stood, * withdrawn*",
        ]
    )
    doc = json.loads((repo / "out.json").read_text())
    p50 = next(c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms")
    assert p50["change_pct"] > 100  # what this process measured ...
    assert p50["verdict"] == "inconclusive"  # ... but beside the base commit it was not
    assert p50["confirmation"]["kind"] == "not_shown"
    assert p50["confirmation"]["where"] == ["beside the base commit"]
    assert len(p50["confirm_change_pct"]) == 1 and p50["confirm_change_pct"][0] < 50
    assert doc["settings"]["confirm"] == 1
    assert [len(r) for r in doc["confirm_base_results"]] == [1]  # the base side, kept
    report = (repo / "reports/perfguard.md").read_text()
    assert "measured again beside the base commit, 1 time, in this job" in report

    (repo / "slow-once").write_text("")  # without confirming, the same run is a regression
    once = run(
        pytester, "--perfguard", "--perfguard-repeats=5", "--perfguard-confirm=0",
        "--perfguard-full",
    )  # fmt: skip
    assert once.ret == pytest.ExitCode.TESTS_FAILED, once.stdout.str()
    assert "confirming" not in once.stdout.str()


@pytest.mark.slow
def test_a_real_slowdown_stands_when_re_measured_and_the_report_says_so(
    pytester: pytest.Pytester, repo: Path
) -> None:
    assert run(pytester, "--perfguard", "--perfguard-save", "--perfguard-repeats=5").ret == 0
    commit_latency(repo, 4.0)  # every process of this code is slower than the base's
    result = run(
        pytester,
        "--perfguard",
        "--perfguard-json=out.json",
        "--perfguard-repeats=5",
        "--perfguard-confirm=2",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*(1 of 2)*", "*(2 of 2)*", "*regression found*"])
    doc = json.loads((repo / "out.json").read_text())
    p50 = next(c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms")
    assert p50["verdict"] == "regression"
    assert len(p50["confirm_change_pct"]) == 2 and min(p50["confirm_change_pct"]) > 50
    assert p50["confirmation"]["kind"] == "shown"  # flagged, and shown again
    assert p50["confirmation"]["where"] == ["beside the base commit"]
    report = (repo / "reports/perfguard.md").read_text()
    assert "| detectable | re-measured |" in report
    assert "measured again beside the base commit, 2 times, in this job" in report


def test_the_re_measure_loads_the_plugins_this_session_loaded() -> None:
    from perfguard.pytest_plugin.confirm import plugin_args

    args = ["-q", "-p", "no:randomly", "-pmyplugin", "--pdb", "tests", "-p"]
    assert plugin_args(args) == ["-p", "no:randomly", "-p", "myplugin"]


@pytest.mark.slow
def test_the_re_measure_waits_out_the_gap_after_the_last_measurement(
    pytestconfig: pytest.Config,
) -> None:
    """Without the base commit in the checkout, the flagged items are measured again alone,
    no sooner than the gap after they (or the previous round) were measured."""
    from perfguard.confirm import ConfirmRound

    now = [100.0]
    slept: list[float] = []
    calls: list[list[str]] = []

    def child(
        root: Path, args: Sequence[str], items: Mapping[tuple[str, str], str]
    ) -> ConfirmRound:
        calls.append(sorted(items.values()))
        assert "--perfguard-compare=none" in args
        assert not [a for a in args if a.startswith("--perfguard-ab")]
        now[0] += 5.0  # the child takes 5 s
        return ConfirmRound(
            tuple(VariantResult(test=t, variant=v, status="error", error="fake") for t, v in items)
        )

    said: list[str] = []
    again = _remeasurer(pytestconfig, child, now, slept, said)
    unknown = "0" * 40  # not a commit of this repository: A/B cannot check it out
    assert again([("t", "eager")], unknown).results and slept == [10.0]  # 60 s after t
    assert again([("t", "eager"), ("u", "eager")], None).results and slept == [10.0, 60.0]
    assert calls == [["t.py::t[eager]"], ["t.py::t[eager]", "t.py::u[eager]"]]
    assert any("waiting 60s before re-measuring" in line for line in said)
    assert any("in a fresh process (1 of 2)" in line for line in said)
    assert again([("nobody", "eager")], None) == ConfirmRound(())  # not measured here
    # undecided items: only a measure beside the base commit could settle them
    assert again([], None, [("u", "eager")]) == ConfirmRound(())
    assert len(calls) == 2


@pytest.mark.slow
def test_the_re_measure_runs_beside_the_base_commit_when_the_checkout_has_it(
    pytestconfig: pytest.Config,
) -> None:
    from perfguard.confirm import ConfirmRound

    now = [100.0]
    slept: list[float] = []
    seen: list[Sequence[str]] = []
    base = VariantResult(test="t", variant="eager", status="error", error="fake base")

    def child(
        root: Path, args: Sequence[str], items: Mapping[tuple[str, str], str]
    ) -> ConfirmRound:
        seen.append(args)
        return ConfirmRound(
            tuple(VariantResult(test=t, variant=v, status="error", error="fake") for t, v in items),
            (base,),
        )

    said: list[str] = []
    again = _remeasurer(pytestconfig, child, now, slept, said)
    head = git(Path(pytestconfig.rootpath), "rev-parse", "HEAD")
    made = again([("t", "eager")], head[:12])  # an abbreviated sha resolves too
    assert made.base_results == (base,)
    assert slept == []  # a slow spell hits both sides of a pair alike: no gap to wait
    assert f"--perfguard-ab={head}" in seen[0] and "--perfguard-compare=none" not in seen[0]
    # the round stops its pairs by this session's thresholds
    assert {"--perfguard-min-change=10.0", "--perfguard-ab-min-change=5.0"} <= set(seen[0])
    assert any(f"beside the base commit {head[:10]} (A/B) (1 of 2)" in line for line in said)
    # beside the base commit, the undecided items are measured too
    both = again([("t", "eager")], head, [("u", "eager")])
    assert [r.key for r in both.results] == [("t", "eager"), ("u", "eager")]
    assert any("confirming 1 flagged and 1 undecided item(s) beside" in line for line in said)


def test_recording_allocation_sites_asks_for_one_block_and_waits_for_nothing(
    pytestconfig: pytest.Config,
) -> None:
    """The sites re-measure takes nothing from its timing: one block (`--perfguard-repeats=1`,
    and one pair in A/B), no gap waited, whatever the session's own repeats."""
    from perfguard.confirm import ConfirmRound

    now, slept, said = [100.0], list[float](), list[str]()
    asked: list[list[str]] = []

    def child(
        root: Path, args: Sequence[str], items: Mapping[tuple[str, str], str]
    ) -> ConfirmRound:
        asked.append(list(args))
        return ConfirmRound(())

    again = _remeasurer(pytestconfig, child, now, slept, said, sites=True)
    again([("t", "eager")], None)
    assert slept == [] and "--perfguard-repeats=1" in asked[0]
    assert any("recording the allocation sites of 1 item(s)" in line for line in said)


def _remeasurer(
    config: pytest.Config,
    child: Any,
    now: list[float],
    slept: list[float],
    said: list[str],
    sites: bool = False,
) -> Any:
    from dataclasses import replace

    from perfguard.pytest_plugin.confirm import remeasurer
    from perfguard.pytest_plugin.options import read_options

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    return remeasurer(
        config,
        replace(read_options(config), confirm=2, confirm_gap_s=60.0),
        {("t", "eager"): "t.py::t[eager]", ("u", "eager"): "t.py::u[eager]"},
        {"t.py::t[eager]": 50.0, "t.py::u[eager]": 90.0},  # measured 50 s and 10 s ago
        said.append,
        run_child=child,
        clock=lambda: now[0],
        sleep=sleep,
        sites=sites,
    )


@pytest.mark.slow
def test_a_bad_confirm_count_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_SUITE)
    result = run(pytester, "--perfguard", "--perfguard-confirm=twice")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perfguard-confirm: must be a whole number, got 'twice'*"])


@pytest.mark.slow
def test_a_corrupt_baseline_stops_the_comparison_naming_the_file(
    pytester: pytest.Pytester, repo: Path
) -> None:
    a = git(repo, "rev-parse", "HEAD")
    assert run(pytester, "--perfguard", "--perfguard-save").ret == 0
    (baseline,) = (repo / "baselines").glob(f"*/{a}.json.gz")
    text = baseline.read_bytes()
    baseline.write_bytes(text[: len(text) // 2])  # truncated
    git(repo, "commit", "-q", "--allow-empty", "-m", "B")
    result = run(pytester, "--perfguard", "--perfguard-json=out.json")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [f"*comparison stopped: {baseline}: a damaged or truncated gzip file*"]
    )
    assert baseline.read_bytes() == text[: len(text) // 2]  # untouched
    doc = json.loads((repo / "out.json").read_text())  # the measurements are not lost
    assert doc["results"][0]["status"] == "ok"


@pytest.mark.slow
def test_save_refuses_a_dirty_tree_unless_allowed(pytester: pytest.Pytester, repo: Path) -> None:
    (repo / "test_scaled.py").write_text(SCALED + "\n# edited\n")
    result = pytester.runpytest_subprocess("--perfguard", "--perfguard-save")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "uncommitted changes" in result.stderr.str()
    allowed = run(pytester, "--perfguard", "--perfguard-save", "--perfguard-allow-dirty")
    assert allowed.ret == 0


@pytest.mark.slow
def test_each_checkout_picks_the_baseline_interface_section_5_says(
    pytester: pytest.Pytester, repo: Path
) -> None:
    a = git(repo, "rev-parse", "HEAD")
    assert run(pytester, "--perfguard", "--perfguard-save").ret == 0

    def chosen() -> tuple[str | None, str]:
        # verdicts are not the point here (tiny budgets are noisy): only the choice, so
        # nothing flagged is measured again beside the base commit (two more sessions)
        result = run(
            pytester,
            "--perfguard",
            "--perfguard-json=out.json",
            "--perfguard-fail-on=never",
            "--perfguard-confirm=0",
        )
        assert result.ret == 0, result.stdout.str()
        base = json.loads((repo / "out.json").read_text())["baseline"]
        result.stdout.fnmatch_lines([f"*baseline: *({base['reason']})*"])
        return base["commit"], base["reason"]

    b = git(repo, "commit", "-q", "--allow-empty", "-m", "B") or git(repo, "rev-parse", "HEAD")
    assert chosen() == (a, f"first parent of HEAD, which is on main: {a[:10]}")

    # a branch made from an older main (A), while main moved on to B (which has a baseline)
    assert run(pytester, "--perfguard", "--perfguard-save", "--perfguard-fail-on=never").ret == 0
    git(repo, "checkout", "-q", "-b", "old-branch", a)
    git(repo, "commit", "-q", "--allow-empty", "-m", "F")
    assert chosen() == (a, f"merge-base of HEAD with main: {a[:10]}")

    # GitHub's pull-request merge commit: first parent is the base tip B
    git(repo, "checkout", "-q", "--detach", b)
    git(repo, "merge", "-q", "--no-ff", "old-branch", "-m", "Merge PR")
    commit_b, reason = chosen()
    assert commit_b == b and reason.startswith("first parent of the pull-request merge commit")


# ---- sharding and merging -----------------------------------------------------------------

SHARDED = """
import pytest, torch

@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.perfguard(variants=["eager", "prune-l1-unstructured:0.5"])
def test_stack(perfguard, depth):
    width = 64
    layers = [torch.nn.Linear(256, width), torch.nn.ReLU()]
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    perfguard.run(torch.nn.Sequential(*layers).eval(), (torch.randn(64, 256),))

def test_plain():
    assert True
"""


@pytest.mark.slow
def test_shards_split_tests_whole_and_merge_compares_them_as_one_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfguard.cli import main

    pytester.makepyfile(test_sharded=SHARDED)
    pytester.makeconftest(SCRIPTED_CLOCK)  # the verdicts are the merge's, not the machine's
    pytester.path.joinpath(".gitignore").write_text(
        "reports/\nshard*.json\nmerged*.json\n__pycache__/\n"
    )
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "A")
    a = git(pytester.path, "rev-parse", "HEAD")
    monkeypatch.chdir(pytester.path)

    def shards(tag: str) -> list[str]:
        paths = []
        for k in (1, 2):
            path = f"shard{k}-{tag}.json"
            out = run(
                pytester,
                "--perfguard",
                f"--perfguard-shard={k}/2",
                "--perfguard-compare=none",
                f"--perfguard-json={path}",
            )
            assert out.ret == 0, out.stdout.str()
            paths.append(path)
        return paths

    first = shards("a")
    tests = [
        {(r["test"], r["variant"]) for r in json.loads(Path(p).read_text())["results"]}
        for p in first
    ]
    assert tests[0] and tests[1] and not tests[0] & tests[1]
    for part in tests:  # every variant of a test is in the same shard
        names = {t for t, _ in part}
        assert part == {(t, v) for t in names for v in ("eager", "prune-l1-unstructured:0.5")}
    assert len(tests[0] | tests[1]) == 6

    assert main(["merge", *first, "-o", "merged-a.json", "--compare", "auto", "--save"]) == 0
    assert (pytester.path / "baselines").is_dir()
    assert list((pytester.path / "baselines").glob(f"*/{a}.json.gz"))

    git(pytester.path, "checkout", "-q", "-b", "feature")
    commit_latency(pytester.path, 4.0)  # every test four times slower
    second = shards("b")
    code = main(
        [
            "merge",
            *second,
            "-o",
            "merged-b.json",
            "--compare",
            "auto",
            "--report",
            "reports/merged.md",
        ]
    )
    assert code == 1
    doc = json.loads((pytester.path / "merged-b.json").read_text())
    assert doc["baseline"]["commit"] == a and len(doc["results"]) == 6
    assert any(c["verdict"] == "regression" for c in doc["comparisons"])
    assert "regression(s)" in (pytester.path / "reports/merged.md").read_text()

    # shards of different commits refuse to merge
    assert main(["merge", first[0], second[1], "-o", "bad.json"]) == 2


@pytest.mark.slow
def test_bad_shard_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sharded=SHARDED)
    for bad in ("3/2", "0/2", "1", "a/b"):
        result = run(pytester, "--perfguard", f"--perfguard-shard={bad}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*--perfguard-shard: expected K/N*"])
