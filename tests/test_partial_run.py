"""A pull request's partial run end to end: only the perf tests its change reaches are
measured (A/B beside the base); the rest are listed, not missing; `--perfguard-full` and a
lockfile change measure everything."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.gitrepo import git
from tests.test_same_job import FAST, LEAST

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
    (pytester.path / ".gitignore").write_text("baselines/\nreports/\n*.json\n")
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "first")
    (pytester.path / "README.md").write_text("# models\n")
    git(pytester.path, "add", "README.md")
    git(pytester.path, "commit", "-q", "-m", "base")

    # main's run: measured beside its parent, and its record of what each test ran stored
    # what is measured is the point, not its verdicts: the least sampling, and no exit code
    # from what noise may read as a change
    fast = (*FAST, *LEAST, "--perfguard-fail-on=never")
    result = pytester.runpytest_subprocess(*fast, "--perfguard", "--perfguard-save")
    assert result.ret == 0, result.stdout.str()
    saved = json.loads(
        gzip.decompress(next((pytester.path / "baselines").rglob("*.json.gz")).read_bytes())
    )
    assert set(saved["reach"]["tests"]) == {"test_a.py::test_a", "test_b.py::test_b"}

    # code, not a comment (a comment changes no block), and no slower
    (pytester.path / "model_b.py").write_text(
        MODEL.replace("    torch.manual_seed(0)", "    torch.manual_seed(0)\n    width = 64")
    )
    git(pytester.path, "commit", "-qam", "touch model b")
    args = (*fast, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json")

    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*partial run: 1 perf item(s) not measured*--perfguard-full*"])
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [r["test"] for r in doc["results"]] == ["test_b.py::test_b"]
    assert [r["test"] for r in doc["baseline_results"]] == ["test_b.py::test_b"]
    sel = doc["selection"]
    assert sel["partial"] and sel["changed"] == ["model_b.py"] and sel["changed_count"] == 1
    assert sel["unaffected"][0]["test"] == "test_a.py::test_a"
    assert sel["reached"] == {"test_b.py::test_b": "model_b.py: build"}
    assert not doc["incomplete"]  # left out on purpose: not a gap
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "Not measured: unaffected by this change" in report and "test&#95;a" in report
    assert "model&#95;b.py: build" in report  # what reached the measured test

    # -k chose test_a: test_b, which the change reaches, is not listed as unaffected
    result = pytester.runpytest_subprocess(*args, "-k", "test_a")
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [u["test"] for u in doc["selection"]["unaffected"]] == ["test_a.py::test_a"]

    # a change no perf test reaches measures nothing, and passes (not pytest's exit 5)
    (pytester.path / "NOTES.md").write_text("# notes\n")
    git(pytester.path, "add", "NOTES.md")
    git(pytester.path, "commit", "-qm", "notes")
    result = pytester.runpytest_subprocess(*fast, "--perfguard", "--perfguard-ab=HEAD~2")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*partial run: 1 perf item(s) not measured*"])
