"""Main's run (`--perfguard-save`): HEAD measured beside its first parent in the same job,
the paired change stored with its baseline; measured alone where it cannot be, saying why."""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import pytest

from tests.gitrepo import git
from tests.test_same_job import FAST, LEAST, scratch_repo


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
    # the pairs' interval is stored with the pair. It is the interval of the pairs' trimmed
    # mean log ratio; the p50 change beside it compares the two sides' medians, which a busy
    # machine moved outside it once (-19.3% beside an interval from -7.7%): neither bounds the other
    low, high = p50["change_ci"]
    assert math.isfinite(low) and math.isfinite(high) and low < high
    assert not doc.get("baseline_results")  # the parent's side is not stored as HEAD's
    assert not list(pytester.path.glob(f"baselines/*/{parent}.json*"))  # nor as its own


@pytest.mark.slow
def test_unpaired_and_shallow_saves_measure_head_alone(pytester: pytest.Pytester) -> None:
    scratch_repo(pytester, base_depth=4, head_depth=4, bar=30)
    head = git(pytester.path, "rev-parse", "HEAD")
    result = pytester.runpytest_subprocess(
        *FAST, *LEAST, "--perfguard", "--perfguard-save", "--perfguard-save-unpaired"
    )
    assert result.ret == 0, result.stdout.str()
    assert stored(pytester.path, head)["baseline"]["mode"] == "stored"
    # a clone of depth 1 lacks the parent: measured alone, and said so
    clone = pytester.path.parent / "shallow"
    git(pytester.path.parent, "clone", "-q", "--depth=1", f"file://{pytester.path}", str(clone))
    done = pytester.run(
        sys.executable, "-m", "pytest", str(clone), f"--rootdir={clone}", *FAST, *LEAST,
        "--perfguard", "--perfguard-save", "-p", "no:xdist",
    )  # fmt: skip
    assert done.ret == 0, done.stdout.str()
    done.stdout.fnmatch_lines(["*this checkout lacks HEAD's first parent*fetch-depth: 2*"])
    assert stored(clone, head)["baseline"]["mode"] == "stored"


def test_save_unpaired_alone_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--perfguard", "--perfguard-save-unpaired")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perfguard-save-unpaired says how --perfguard-save*"])


COMPILED_TEST = """
import pytest, torch
from torch import nn

@pytest.mark.perfguard(variants=["compile-default"])
def test_small(perfguard):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    perfguard.run(model, (torch.randn(4, 32),))
"""


@pytest.mark.slow
def test_main_writes_the_compile_cache_and_the_base_side_loads_it(
    pytester: pytest.Pytester,
) -> None:
    """Main's run stores its compiled artifacts; a pull request's base side compiles from
    them, its cold compile taken from the stored baseline; this tree's is measured cold."""
    pytester.makepyfile(test_small=COMPILED_TEST)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "only")
    head = git(pytester.path, "rev-parse", "HEAD")
    cache = "--perfguard-compile-cache=cc"
    result = pytester.runpytest_subprocess(*FAST, *LEAST, "--perfguard", "--perfguard-save", cache)
    assert result.ret == 0, result.stdout.str()
    assert len(list((pytester.path / "cc").glob("*.bin"))) == 1
    saved = stored(pytester.path, head)["results"][0]
    assert saved["details"]["compile_cache"] == "written"
    cold = saved["metrics"]["compile_time_s"]

    result = pytester.runpytest_subprocess(
        *FAST, *LEAST, "--perfguard", "--perfguard-ab=HEAD", cache, "--perfguard-json=out.json",
        "--perfguard-full",  # identical trees: a partial run would measure nothing
        "--perfguard-fail-on=never",  # identical trees on a busy machine may read a change
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    (base,), (mine,) = doc["baseline_results"], doc["results"]
    assert base["details"]["compile_cache"] == "hit"
    assert base["metrics"]["compile_time_s"] == cold  # main's cold compile stands in
    assert base["details"]["compile_from_cache_s"] > 0
    assert "compile_cache" not in mine["details"]  # measured cold, in a fresh cache
    assert mine["metrics"]["compile_time_s"] > 0
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "**Compile cache:** the base: hit 1" in report


@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo"])
def test_a_cache_key_that_is_no_regular_file_is_never_read(tmp_path: Path, kind: str) -> None:
    """A link to /dev/zero passed the size cap (its size reads 0) and a pipe would block:
    neither is read."""
    import os

    import torch

    from perfguard.measure.compile_cache import CompileCache

    cache = CompileCache(tmp_path, "load", "lock", "t.py::test_x", "compile-default")
    path = cache.path(torch.device("cpu"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    why = cache.load(torch.device("cpu"))
    assert why is not None and "not a regular file" in why


@pytest.mark.slow  # a compiled variant, three times
@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "rejected by torch"),
        (b"random bytes, not artifacts" * 40, "rejected by torch"),
        (None, "past the 512 MiB a cache file may be: not read"),
    ],
)
def test_a_cache_file_torch_rejects_or_too_large_to_read_is_a_miss_in_one_line(
    tmp_path: Path, content: bytes | None, said: str
) -> None:
    import torch

    from perfguard.measure.compile_cache import MAX_FILE_BYTES, CompileCache

    cache = CompileCache(tmp_path, "load", "lock", "t.py::test_x", "compile-default")
    path = cache.path(torch.device("cpu"))
    assert cache.load(torch.device("cpu")) == "no artifacts for this item"
    with path.open("wb") as f:
        if content is None:  # a sparse file past the cap: its size alone must refuse it
            f.seek(MAX_FILE_BYTES + 1)
            f.write(b"\0")
        else:
            f.write(content)
    why = cache.load(torch.device("cpu"))
    assert why is not None and said in why and "\n" not in why
