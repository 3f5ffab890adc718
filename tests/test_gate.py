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
from perfguard.report import markdown
from tests.gitrepo import git
from tests.test_plugin import FAST
from tests.timing import SCRIPTED_CLOCK

# imported before any pytester test: pytester puts sys.modules back after each test, and
# scipy (under the report) cannot be imported twice in one process
assert markdown.render_markdown is not None

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
    """A base at 1 ms a call, its head at 17.5 ms (+1650%) that also raises its own bars."""
    pytester.makeconftest(SCRIPTED_CLOCK)
    pytester.makepyfile(mymodels=MODEL, test_loose=LOOSE.format(marker=""))
    (pytester.path / "latency_ms.txt").write_text("1.0")
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    marker = ", ab_min_change_pct=900, min_change_pct=900"
    pytester.makepyfile(test_loose=LOOSE.format(marker=marker))
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
    assert {
        "test": "test_loose.py::test_mlp",
        "rule": rule,
        "head": 900,
        "base": 5.0 if (mode == "ab") else 10.0,
    } in doc["settings"]["loosened"]
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "This change loosens its own bars" in report and "perfguard-accept.toml" in report
    assert f"`{rule}` 900, judged by the base's" in report


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
