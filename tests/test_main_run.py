"""Main's run (`--perfguard-save`): HEAD measured beside its first parent in the same job,
the paired change stored with its baseline; measured alone where it cannot be, saying why."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from tests.gitrepo import git
from tests.test_same_job import FAST, scratch_repo


def stored(root: Path, sha: str) -> dict:  # type: ignore[type-arg]
    (found,) = root.glob(f"baselines/*/{sha}.json*")
    data = found.read_bytes()
    return json.loads(gzip.decompress(data) if found.suffix == ".gz" else data)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_main_run_measures_head_beside_its_parent_and_stores_the_pair(
    pytester: pytest.Pytester,
) -> None:
    parent = scratch_repo(pytester, base_depth=4, head_depth=4, bar=30)
    head = git(pytester.path, "rev-parse", "HEAD")
    result = pytester.runpytest_subprocess(*FAST, "--perfguard", "--perfguard-save")
    assert result.ret == 0, result.stdout.str()
    doc = stored(pytester.path, head)
    assert doc["baseline"]["mode"] == "ab" and doc["baseline"]["commit"] == parent
    assert "HEAD's first parent" in doc["baseline"]["reason"]
    p50 = next(c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms")
    assert p50["verdict"] == "unchanged"
    low, high = p50["change_ci"]
    assert low <= p50["change_pct"] <= high
    assert not doc.get("baseline_results")  # the parent's side is not stored as HEAD's
    assert not list(pytester.path.glob(f"baselines/*/{parent}.json*"))  # nor as its own


@pytest.mark.slow
def test_unpaired_and_shallow_saves_measure_head_alone(pytester: pytest.Pytester) -> None:
    scratch_repo(pytester, base_depth=4, head_depth=4, bar=30)
    head = git(pytester.path, "rev-parse", "HEAD")
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-save", "--perfguard-save-unpaired"
    )
    assert result.ret == 0, result.stdout.str()
    assert stored(pytester.path, head)["baseline"]["mode"] == "stored"
    # a clone of depth 1 lacks the parent: measured alone, and said so
    clone = pytester.path.parent / "shallow"
    git(pytester.path.parent, "clone", "-q", "--depth=1", f"file://{pytester.path}", str(clone))
    done = pytester.run(
        sys.executable, "-m", "pytest", str(clone), f"--rootdir={clone}", *FAST, "--perfguard",
        "--perfguard-save", "-p", "no:xdist",
    )  # fmt: skip
    assert done.ret == 0, done.stdout.str()
    done.stdout.fnmatch_lines(["*this checkout lacks HEAD's first parent*fetch-depth: 2*"])
    assert stored(clone, head)["baseline"]["mode"] == "stored"


def test_save_unpaired_alone_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--perfguard", "--perfguard-save-unpaired")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perfguard-save-unpaired says how --perfguard-save*"])
