"""The gate never passes what it did not measure: a broken module, a test that measured
nothing, a hang, a cancelled session, a deleted test and a base tree that fails to collect
each make the run incomplete (a gap in its JSON, the report's first line), and `merge` and
`report --exit-code` fail on it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfguard import cli
from perfguard.records import Gap, Run
from tests.gitrepo import git
from tests.test_plugin import FAST
from tests.timing import SCRIPTED_CLOCK

MODEL = """
import torch

def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).eval()
    return model, (torch.randn(4, 16),)
"""

GOOD = """
import pytest
from mymodels import mlp

@pytest.mark.perfguard(variants=["eager"])
def test_good(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)
"""

BROKEN = """
import pytest
import no_such_module_here

@pytest.mark.perfguard(variants=["eager"])
def test_never(perfguard):
    pass
"""

FORGETS = """
import pytest

@pytest.mark.perfguard(variants=["eager"])
def test_forgets(perfguard):
    assert True  # never calls perfguard.run
"""

HANGS = """
import time, pytest, torch

class Hangs(torch.nn.Module):
    def forward(self, x):
        while True:
            time.sleep(0.05)

@pytest.mark.perfguard(variants=["eager"], timeout_s=2)
def test_hangs(perfguard):
    perfguard.run(Hangs(), (torch.randn(2, 2),))
"""


def gaps(path: Path) -> dict[str, Gap]:
    run = Run.from_json(json.loads(path.read_text()))
    return {g.kind: g for g in run.incomplete}


@pytest.mark.slow
def test_a_broken_module_a_test_that_measures_nothing_and_a_hang_make_the_run_incomplete(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(mymodels=MODEL, test_good=GOOD, test_broken=BROKEN)
    pytester.makepyfile(test_forgets=FORGETS, test_hangs=HANGS)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        *FAST,
        "--perfguard",
        "--perfguard-compare=none",
        "--perfguard-json=out.json",
        "--continue-on-collection-errors",
    )
    assert time.monotonic() - started < 120  # the hang was ended, not waited out
    out = result.stdout.str()
    assert result.ret != 0, out
    found = gaps(pytester.path / "out.json")
    assert set(found) == {"collection_error", "not_measured", "timeout"}
    assert "test_broken.py" in found["collection_error"].items
    assert "No module named 'no_such_module_here'" in found["collection_error"].detail
    assert found["not_measured"].items == ("test_forgets.py::test_forgets[eager]",)
    assert "never called perfguard.run" in found["not_measured"].detail
    assert found["timeout"].items == ("test_hangs.py::test_hangs[eager]",)
    doc = json.loads((pytester.path / "out.json").read_text())
    hung = next(r for r in doc["results"] if r["test"] == "test_hangs.py::test_hangs")
    assert hung["status"] == "error" and "time limit of 2 s" in hung["error"]
    assert any(r["status"] == "ok" for r in doc["results"])  # the session went on
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert report.splitlines()[1].startswith("## perfguard: incomplete run (collection error")

    # the compare job's commands fail on it, with one line saying why
    assert cli.main(["report", str(pytester.path / "out.json"), "--exit-code"]) == 1
    assert "incomplete run: 1 test module(s) did not collect" in capsys.readouterr().err
    merged = pytester.path / "merged.json"
    assert cli.main(["merge", str(pytester.path / "out.json"), "-o", str(merged)]) == 1
    assert set(gaps(merged)) == set(found)


SLOW_SECOND = """
import os, time, pytest, torch
from mymodels import mlp

@pytest.mark.perfguard(variants=["eager"])
def test_first(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)

class Slow(torch.nn.Module):
    def forward(self, x):
        open("hanging", "w").close()
        while True:
            time.sleep(0.05)

@pytest.mark.perfguard(variants=["eager"])
def test_second(perfguard):
    perfguard.run(Slow(), (torch.randn(2, 2),))

@pytest.mark.perfguard(variants=["eager"])
def test_third(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)
"""


@pytest.mark.slow
def test_a_cancelled_session_names_what_it_did_not_measure(tmp_path: Path) -> None:
    """Cancelled as Actions cancels a job: SIGINT, then SIGTERM."""
    (tmp_path / "mymodels.py").write_text(MODEL)
    (tmp_path / "test_cancel.py").write_text(SLOW_SECOND)
    args = [*FAST, "--perfguard", "--perfguard-compare=none", "--perfguard-json=out.json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    deadline = time.monotonic() + 240
    while not (tmp_path / "hanging").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    found = gaps(tmp_path / "out.json")
    assert set(found) == {"interrupted"}, out.decode()
    assert "SIGTERM" in found["interrupted"].detail
    assert found["interrupted"].items == (
        "test_cancel.py::test_second[eager]",
        "test_cancel.py::test_third[eager]",
    )
    assert cli.main(["report", str(tmp_path / "out.json"), "--exit-code"]) == 1


BASE_A = (
    GOOD
    + """

@pytest.mark.perfguard(variants=["eager"])
def test_gone(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)
"""
)


@pytest.mark.slow
def test_in_a_b_a_deleted_test_is_missing_and_a_base_that_does_not_collect_is_a_gap(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(mymodels=MODEL, test_a=BASE_A, test_b=BROKEN)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base: test_b does not import")
    pytester.makepyfile(test_a=GOOD, test_b=GOOD.replace("test_good", "test_b_good"))
    pytester.makepyfile(test_hangs=HANGS)
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "head: test_gone deleted, test_b mended, a hang")
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json"
    )
    assert result.ret != 0, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    verdicts = {(c["test"], c["verdict"]) for c in doc["comparisons"]}
    assert ("test_a.py::test_gone", "missing") in verdicts
    found = gaps(pytester.path / "out.json")
    assert set(found) == {"base_failed", "timeout", "deleted"}
    assert found["deleted"].items == ("test_a.py::test_gone [eager]",)
    assert "did not collect 1 module(s)" in found["base_failed"].detail
    assert "no_such_module_here" in found["base_failed"].detail
    assert found["timeout"].items == ("test_hangs.py::test_hangs[eager]",)
    assert "test_a.py::test_good" in {r["test"] for r in doc["results"]}  # went on

    # a test deselected here (-k) is not a deleted one
    chosen = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=k.json", "-k", "good"
    )
    assert chosen.ret == 1, chosen.stdout.str()  # the base's module still does not collect
    rows = json.loads((pytester.path / "k.json").read_text())["comparisons"]
    assert {c["test"] for c in rows if c["verdict"] == "missing"} == {"test_a.py::test_gone"}
    assert gaps(pytester.path / "k.json")["deleted"].items == ("test_a.py::test_gone [eager]",)


def test_a_b_driver_kills_a_worker_that_outlives_the_items_time_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from multiprocessing import Pipe

    from perfguard.pytest_plugin.ab import side as ab_side

    monkeypatch.setattr(ab_side, "LIMIT_GRACE_S", 0.0)
    monkeypatch.setattr(ab_side, "POLL_S", 0.05)
    here, there = Pipe()
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    worker = ab_side.Side("B", "this tree", tmp_path, (), tmp_path / "log", proc=hung, conn=here)
    worker.limit(0.3)
    started = time.monotonic()
    with pytest.raises(ab_side.WorkerExitedError, match=r"time limit of 0\.3 s"):
        worker.recv()
    assert time.monotonic() - started < 30 and hung.poll() is not None  # killed
    there.close()


LOOSE = """
import pytest
from mymodels import mlp

@pytest.mark.perfguard(variants=["eager"]{marker})
def test_mlp(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)
"""


def loosening_repo(pytester: pytest.Pytester) -> None:
    """A base at 1 ms a call, its head at 17.5 ms (+1650%) that also raises its own bars,
    takes fewer repeats in its marker, and in its ini withholds speed verdicts on an
    unhealthy runner, confirms three times and never fails on a regression."""
    pytester.makeconftest(SCRIPTED_CLOCK)
    pytester.makepyfile(mymodels=MODEL, test_loose=LOOSE.format(marker=""))
    (pytester.path / "latency_ms.txt").write_text("1.0")
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    marker = ", ab_min_change_pct=900, min_change_pct=900, repeats=2"
    pytester.makepyfile(test_loose=LOOSE.format(marker=marker))
    pytester.makeini(
        "[pytest]\nperfguard_unhealthy = inconclusive\nperfguard_fail_on = never\n"
        "perfguard_confirm = 3\n"
    )
    git(pytester.path, "add", "-A")
    (pytester.path / "latency_ms.txt").write_text("17.5")
    git(pytester.path, "commit", "-q", "-am", "head: slower, and its bar loosened")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ab", "stored"])
def test_a_change_that_loosens_its_own_bar_is_judged_by_the_bases(
    pytester: pytest.Pytester, mode: str
) -> None:
    loosening_repo(pytester)
    if mode == "stored":
        git(pytester.path, "checkout", "-q", "HEAD~1")
        saved = pytester.runpytest_subprocess(*FAST, "--perfguard", "--perfguard-save")
        assert saved.ret == 0, saved.stdout.str()
        git(pytester.path, "checkout", "-q", "main")
        args = ["--perfguard-confirm=0"]
    else:
        args = ["--perfguard-ab=HEAD~1"]
    result = pytester.runpytest_subprocess(*FAST, "--perfguard", *args, "--perfguard-json=out.json")
    assert result.ret == 1, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    p50 = next(c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms")
    assert p50["verdict"] == "regression" and p50["change_pct"] > 1000
    rule = "ab_min_change_pct" if mode == "ab" else "min_change_pct"
    loosened = doc["settings"]["loosened"]
    assert {
        "test": "test_loose.py::test_mlp",
        "rule": rule,
        "head": 900,
        "base": 5.0 if (mode == "ab") else 10.0,
    } in loosened
    # the settings that withhold a verdict or take the power to see it, judged by the base's
    # (its base took the command line's 3: FAST)
    assert {"test": "test_loose.py::test_mlp", "rule": "repeats", "head": 2, "base": 3} in loosened
    run_level = {(x["rule"], x["head"], x["base"]) for x in loosened if x["test"] == "*"}
    assert run_level == {
        ("unhealthy", "inconclusive", "warn"),
        ("fail_on", "never", "regression"),
        # stored: the command line's --perfguard-confirm=0 is stricter than the base's 1
        *([("confirm", 3, 1)] if mode == "ab" else []),
    }
    assert doc["settings"]["unhealthy"] == "warn" and doc["settings"]["fail_on"] == "regression"
    [result_of] = doc["results"]
    assert result_of["metrics"]["latency_samples"] > 0
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "This change loosens its own bars" in report and "perfguard-accept.toml" in report
    assert f"`{rule}` 900, judged by the base's" in report
    assert "`unhealthy` inconclusive, judged by the base's warn" in report


@pytest.mark.slow  # a second or more
@pytest.mark.parametrize(
    "source",
    [("-p", "no:cacheprovider", "--perfguard-ab-min-change=100000"), ("marker",)],
)
def test_a_bar_past_its_bound_is_refused_from_every_source(
    pytester: pytest.Pytester, source: tuple[str, ...]
) -> None:
    marker = "ab_min_change_pct=100000" if source == ("marker",) else ""
    pytester.makepyfile(
        test_bar=f"""
import pytest

@pytest.mark.perfguard({marker})
def test_x(perfguard):
    pass
"""
    )
    args = () if source == ("marker",) else source
    result = pytester.runpytest_subprocess("--perfguard", *args)
    assert result.ret != 0
    assert "must be between 0 and 1000, got 100000" in result.stdout.str() + result.stderr.str()


MISUSES = """
import pytest, torch

class NoTokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
    def generate(self, ids, **kwargs):
        return None

@pytest.mark.perfguard(variants=["eager"])
def test_a_lambda(perfguard):
    perfguard.run(lambda x: x * 2, (torch.randn(2, 2),))

@pytest.mark.perfguard(variants=["eager"])
def test_no_tokens(perfguard):
    perfguard.generate(NoTokens(), torch.zeros(1, 3, dtype=torch.long), max_new_tokens=2)

@pytest.mark.perfguard(variants=["eager"])
def test_negative_tolerance(perfguard):
    perfguard.run(torch.nn.Linear(2, 2), (torch.randn(2, 2),), drift_tolerance=-1)
"""


@pytest.mark.slow
def test_a_misused_fixture_says_what_to_do_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_misuse=MISUSES)
    result = pytester.runpytest_subprocess(*FAST, "--perfguard", "--perfguard-compare=none")
    out = result.stdout.str()
    assert "perfguard.run() measures a torch.nn.Module, got function" in out
    assert "NoTokens.generate() returned NoneType, not the token ids" in out
    assert "drift_tolerance: must be from 0 to 1" in out
    assert "AttributeError" not in out


@pytest.mark.slow
def test_in_a_b_a_perf_module_the_change_breaks_makes_the_run_incomplete(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(mymodels=MODEL, test_a=GOOD, test_b=GOOD.replace("test_good", "test_b"))
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    pytester.makepyfile(test_b=BROKEN)
    git(pytester.path, "commit", "-q", "-am", "head: test_b no longer imports")
    result = pytester.runpytest_subprocess(
        *FAST,
        "--perfguard",
        "--perfguard-ab=HEAD~1",
        "--perfguard-json=out.json",
        "--continue-on-collection-errors",
    )
    assert result.ret != 0, result.stdout.str()
    assert set(gaps(pytester.path / "out.json")) == {"collection_error"}
    assert "perfguard: incomplete run: 1 test module(s) did not collect" in result.stdout.str()


@pytest.mark.slow
def test_in_stored_mode_a_deleted_test_is_a_gap_and_a_deselected_one_is_not(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(mymodels=MODEL, test_a=BASE_A)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    saved = pytester.runpytest_subprocess(*FAST, "--perfguard", "--perfguard-save")
    assert saved.ret == 0, saved.stdout.str()
    pytester.makepyfile(test_a=GOOD)  # test_gone deleted
    git(pytester.path, "commit", "-q", "-am", "head: test_gone deleted")
    args = (*FAST, "--perfguard", "--perfguard-confirm=0")
    result = pytester.runpytest_subprocess(*args, "--perfguard-json=out.json")
    assert result.ret == 1, result.stdout.str()
    assert gaps(pytester.path / "out.json")["deleted"].items == ("test_a.py::test_gone [eager]",)
    assert "perf test(s) of the base commit are gone from this tree" in result.stdout.str()
    pytester.makepyfile(test_a=BASE_A)  # back, and deselected instead
    git(pytester.path, "commit", "-q", "-am", "head: test_gone back")
    chosen = pytester.runpytest_subprocess(*args, "--perfguard-json=k.json", "-k", "good")
    assert "deleted" not in gaps(pytester.path / "k.json"), chosen.stdout.str()


def test_an_a_b_worker_waiting_for_its_driver_does_not_spend_its_items_time() -> None:
    """The alarm is held still while the worker waits (the driver busy with the other side),
    and goes on counting afterwards."""
    from perfguard.pytest_plugin.timeout import ItemTimeout, paused, time_limit

    fired: list[bool] = []
    with pytest.raises(ItemTimeout), time_limit(0.3, lambda: fired.append(True)):
        with paused():
            time.sleep(0.6)  # twice the limit, waiting: no alarm
        assert not fired
        time.sleep(5)  # the item's own time runs out
    assert fired


@pytest.mark.parametrize(
    ("rule", "head", "base", "looser"),
    [
        ("unhealthy", "inconclusive", "warn", True),
        ("unhealthy", "warn", "inconclusive", False),
        ("fail_on", "never", "regression", True),
        ("confirm", 3, 1, True),  # more rounds to withdraw a verdict
        ("confirm", 0, 1, False),
        ("repeats", 2, 5, True),
        ("budget_s", 0.5, 2.0, True),
        ("budget_s", 4.0, 2.0, False),
        ("drift_tolerance", 0.5, 0.1, True),
        ("drift_tolerance", 0.05, 0.1, False),
        ("drift_tolerance", None, 0.1, True),  # dropped: the class's own may be looser
        ("drift_tolerance", 0.05, None, True),  # set where the base left the class's own
        ("drift_tolerance", {"int8": 0.1}, {"int8": 0.2, "pruned": 0.3}, True),
        ("drift_tolerance", {"int8": 0.1, "pruned": 0.3}, {"int8": 0.2, "pruned": 0.3}, False),
        ("alpha", 0.01, 0.05, True),
        ("min_change_pct", 20.0, 10.0, True),
    ],
)
def test_each_setting_loosens_the_way_its_row_says(
    rule: str, head: object, base: object, looser: bool
) -> None:
    from perfguard.stats import bars

    assert bars.looser(rule, head, base) is looser


def test_an_items_settings_are_floored_at_the_bases_and_a_file_cannot_set_them() -> None:
    from perfguard.stats import bars

    found, loosened = bars.floors(
        {"budget_s": 2.0, "repeats": 5, "drift_tolerance": None},
        {"t.py::a": {"repeats": 2, "budget_s": 0.01}, "t.py::new": {"repeats": 1}},
        {"budget_s": 2.0, "repeats": 5},
        {"t.py::a": {}},
    )
    assert found == {"t.py::a": {"repeats": 5, "budget_s": 2.0}}  # a new test is its own
    assert {(x.test, x.rule) for x in loosened} == {("t.py::a", "repeats"), ("t.py::a", "budget_s")}
    # a record's values are checked as the table says: one out of bounds is dropped
    read = bars.read_guarded(
        {
            "run": {"budget_s": 1e9, "repeats": 5, "unhealthy": "<script>"},
            "tests": {"t": {"repeats": -1}},
        }
    )
    assert read == ({"repeats": 5}, {"t": {}})
    assert bars.read_guarded({"nothing": 1}) is None


SPIN = "void spin(void) { volatile unsigned long x = 0; for (;;) { x++; } }\n"
NATIVE_HANG = """
import ctypes, pathlib, pytest, torch
from mymodels import mlp

@pytest.mark.perfguard(variants=["eager"])
def test_first(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)

class Spins(torch.nn.Module):
    def forward(self, x):
        ctypes.CDLL(str(pathlib.Path(__file__).parent / "spin.so")).spin()  # never returns

@pytest.mark.perfguard(variants=["eager"], timeout_s=2)
def test_spins(perfguard):
    perfguard.run(Spins(), (torch.randn(2, 2),))

@pytest.mark.perfguard(variants=["eager"])
def test_after(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)
"""


@pytest.mark.slow
def test_a_hang_in_native_code_ends_at_its_limit_with_what_was_measured_written(
    pytester: pytest.Pytester,
) -> None:
    """A C loop no signal reaches: the session's watchdog writes the results file and the
    report (the first item's result, the hung item a timeout gap, the last not measured)
    and ends the session, a grace after the limit."""
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler for the native loop")
    (pytester.path / "spin.c").write_text(SPIN)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", "spin.so", "spin.c"], cwd=pytester.path, check=True
    )
    pytester.makepyfile(mymodels=MODEL, test_native=NATIVE_HANG)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-compare=none", "--perfguard-json=out.json", timeout=120
    )
    took = time.monotonic() - started
    assert result.ret == -signal.SIGKILL or result.ret == 128 + signal.SIGKILL, result.stderr.str()
    assert took < 60, took  # its limit (2 s) and a grace (5 s), after the first item
    found = gaps(pytester.path / "out.json")
    assert found["timeout"].items == ("test_native.py::test_spins[eager]",)
    assert "hung in native code" in found["timeout"].detail
    assert found["not_measured"].items == ("test_native.py::test_after[eager]",)
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [r["test"] for r in doc["results"]] == ["test_native.py::test_first"]
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "incomplete run" in report and "hung in native code" in report


IMPORT_HANG = """
import time
time.sleep(600)  # importing this module never ends
"""


@pytest.mark.slow
def test_a_module_that_hangs_while_imported_is_a_collection_error_at_the_limit(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(mymodels=MODEL, test_good=GOOD, test_import_hang=IMPORT_HANG)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        *FAST,
        "--perfguard",
        "--perfguard-compare=none",
        "--perfguard-json=out.json",
        "--perfguard-import-timeout=2",
        "--continue-on-collection-errors",
        timeout=120,
    )
    assert time.monotonic() - started < 60
    assert result.ret == 1, result.stdout.str()
    found = gaps(pytester.path / "out.json")
    assert found["collection_error"].items == ("test_import_hang.py",)
    assert "import limit of 2 s (--perfguard-import-timeout)" in found["collection_error"].detail
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [r["status"] for r in doc["results"]] == ["ok"]  # the other module was measured


@pytest.mark.slow
def test_the_limit_holds_beside_pytest_timeout_and_each_rerun_gets_its_own(
    pytester: pytest.Pytester,
) -> None:
    """pytest-timeout owns SIGALRM (its --timeout is far away here); perfguard's limit still
    ends the hang at 2 s. Under pytest-rerunfailures, an attempt past its limit is run again
    with a limit of its own, and a rerun that measures is the item's result: no gap."""
    pytest.importorskip("pytest_timeout")
    pytest.importorskip("pytest_rerunfailures")
    pytester.makepyfile(mymodels=MODEL, test_hangs=HANGS)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-compare=none", "--perfguard-json=out.json",
        "--timeout=300", timeout=120,
    )  # fmt: skip
    assert time.monotonic() - started < 60, result.stdout.str()
    assert set(gaps(pytester.path / "out.json")) == {"timeout"}

    pytester.makepyfile(
        test_hangs=HANGS.replace(
            "        while True:",
            "        import pathlib\n        flag = pathlib.Path('hung-once')\n"
            "        while not flag.exists():\n            flag.write_text('')",
        ).replace("            time.sleep(0.05)", "            time.sleep(30)\n        return x")
    )
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-compare=none", "--perfguard-json=out.json",
        "--timeout=300", "--reruns=1", timeout=120,
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*1 passed, 1 rerun*"])
    doc = json.loads((pytester.path / "out.json").read_text())
    assert not doc["incomplete"] and [r["status"] for r in doc["results"]] == ["ok"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--perfguard-device=cuda",), "--perfguard-device=cuda: CUDA is not available here"),
        (("--perfguard-device=cuda:99",), "--perfguard-device=cuda:99: CUDA is not available"),
        (("--perfguard-baseline-dir=ftp://x/y",), "ftp://x/y: cannot be opened"),
    ],
)
def test_a_device_or_store_this_machine_cannot_use_is_one_line_not_an_internal_error(
    pytester: pytest.Pytester, args: tuple[str, ...], said: str
) -> None:
    pytester.makepyfile(mymodels=MODEL, test_good=GOOD)
    result = pytester.runpytest_subprocess("--perfguard", "-p", "no:cacheprovider", *args)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert said in out and "INTERNALERROR" not in out
    if "ftp" in args[0]:  # a run that reads and writes no store never opens it
        result = pytester.runpytest_subprocess(
            *FAST, "--perfguard", *args, "--perfguard-compare=none"
        )
        assert result.ret == 0, result.stdout.str()


@pytest.mark.slow
def test_an_a_b_run_whose_tree_did_not_collect_says_so_not_comparison_disabled(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(mymodels=MODEL, test_good=GOOD)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    pytester.makepyfile(test_good=GOOD + "\nimport no_such_module_here\n")
    git(pytester.path, "commit", "-qam", "breaks")
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json"
    )
    assert result.ret != 0
    doc = json.loads((pytester.path / "out.json").read_text())
    reason = doc["baseline"]["reason"]
    assert "compare=none" not in reason and "did not collect (test_good.py" in reason, reason
