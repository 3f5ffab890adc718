"""A pull request's partial run end to end: only the perf tests its change reaches are
measured (A/B beside the base); the rest are listed, not missing; `--perfguard-full` and a
lockfile change measure everything."""

from __future__ import annotations

import json

import pytest

from tests.gitrepo import git
from tests.test_same_job import FAST

MODEL = """
import torch
from torch import nn

def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU()).eval(), (torch.randn(8, 64),)
"""
TEST = """
import pytest
from {module} import build

@pytest.mark.perfguard(variants=["eager"], ab_min_change_pct=30)
def test_{name}(perfguard):
    model, inputs = build()
    perfguard.run(model, inputs)
"""


@pytest.mark.slow
def test_a_change_to_one_model_measures_its_test_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_EVENT_NAME", raising=False)
    pytester.makepyfile(model_a=MODEL, model_b=MODEL)
    tests = {f"test_{n}": TEST.format(module=f"model_{n}", name=n) for n in "ab"}
    pytester.makepyfile(**tests)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    (pytester.path / "model_b.py").write_text(MODEL + "\n# tuned\n")
    git(pytester.path, "commit", "-qam", "touch model b")
    args = (*FAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json")

    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*partial run: 1 perf item(s) not measured*--perfguard-full*"])
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [r["test"] for r in doc["results"]] == ["test_b.py::test_b"]
    assert [r["test"] for r in doc["baseline_results"]] == ["test_b.py::test_b"]
    sel = doc["selection"]
    assert sel["partial"] and sel["changed"] == ["model_b.py"] and sel["changed_count"] == 1
    assert sel["unaffected"] == [{"test": "test_a.py::test_a", "variant": "eager", "baseline": {}}]
    assert not doc["incomplete"]  # left out on purpose: not a gap
    assert {c["verdict"] for c in doc["comparisons"]} <= {"unchanged", "inconclusive"}
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "Not measured: unaffected by this change" in report and "test&#95;a" in report

    result = pytester.runpytest_subprocess(*args, "--perfguard-full")
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert len(doc["results"]) == 2 and not doc["selection"]["partial"]

    # a change no perf test reaches measures nothing, and passes (not pytest's exit 5)
    (pytester.path / "NOTES.md").write_text("# notes\n")
    git(pytester.path, "add", "NOTES.md")
    git(pytester.path, "commit", "-qm", "notes")
    result = pytester.runpytest_subprocess(*FAST, "--perfguard", "--perfguard-ab=HEAD~1")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*partial run: 2 perf item(s) not measured*"])

    (pytester.path / "uv.lock").write_text("# pinned\n")
    git(pytester.path, "add", "uv.lock")
    git(pytester.path, "commit", "-qm", "lock")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert len(doc["results"]) == 2
    assert "uv.lock changed, which can move every perf test" in doc["selection"]["reason"]
