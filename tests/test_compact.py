"""Compact baselines: per-repeat summaries and a quantile sketch instead of every sample."""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfguard.cli import main
from perfguard.records import Run, VariantResult
from perfguard.records.sketch import QuantileSketch, percentile
from perfguard.stats.verdicts import compare_runs
from perfguard.store import BaselineStore, read_run_file
from perfguard.store.baselines import baseline_bytes
from perfguard.store.sync import pull, push
from tests.factories import from_blocks, result, run
from tests.gitrepo import clone, git

SHA = "0123456789abcdef0123456789abcdef01234567"
MACHINE = "cuda-test-gpu"


def test_percentile_is_numpys_linear_interpolation() -> None:
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 10, 999):
        data = sorted(rng.lognormal(0, 0.3, n).tolist())
        for q in (0, 1, 25, 50, 95, 99, 100):
            assert percentile(data, q) == pytest.approx(np.percentile(data, q), rel=1e-12)


@pytest.mark.parametrize("shape", ["lognormal", "bimodal", "with zeros and outliers"])
def test_the_sketch_reads_p50_p95_p99_within_one_percent(shape: str) -> None:
    rng = np.random.default_rng(7)
    data = rng.lognormal(np.log(0.03), 0.1, 25_000)  # a 30-µs model
    if shape == "bimodal":
        data[rng.random(data.size) < 0.2] *= 2.5  # a process now and then 2.5x slower
    elif shape == "with zeros and outliers":
        data[:10] = 0.0
        data[10:40] *= 400.0
    sketch = QuantileSketch.of(data.tolist())
    assert sketch.n == data.size
    for q in (0.5, 0.95, 0.99):
        exact = float(np.percentile(data, q * 100))
        assert sketch.quantile(q) == pytest.approx(exact, rel=0.01)
    again = QuantileSketch.from_json(json.loads(json.dumps(sketch.to_json())))
    assert again == sketch


def _fast_result(test: str, seed: int, blocks: int = 5, per_block: int = 5000) -> VariantResult:
    """A 30-µs model at the default budget: 5 repeats of 5,000 calls."""
    rng = random.Random(seed)
    samples = [
        [0.03 * rng.lognormvariate(0, 0.08) for _ in range(per_block)] for _ in range(blocks)
    ]
    return replace(from_blocks(samples), test=test)


def test_a_stored_result_costs_a_few_kilobytes_whatever_its_samples() -> None:
    results = [_fast_result(f"t.py::test_{i}", seed=i) for i in range(10)]
    assert all(r.n_samples == 25_000 for r in results)
    content = baseline_bytes(run(results, commit=SHA))
    assert len(content) / len(results) < 1024  # compressed, per result
    stored = json.loads(gzip.decompress(content))["results"][0]
    assert stored["samples_ms"] is None
    timing = json.dumps({k: stored[k] for k in ("blocks", "sketch")}, separators=(",", ":"))
    assert len(timing) < 2048  # the timing data of one result, uncompressed
    # what the record keeps is what the tests use: per-repeat p50/p95/p99, exactly
    loaded = read_run_file_bytes(content).results[0]
    for q in (50.0, 95.0, 99.0):
        exact = [float(np.percentile(b, q)) for b in results[0].blocks()]
        assert loaded.block_quantiles(q) == pytest.approx(exact, rel=1e-6)
    assert loaded.n_samples == 25_000 and loaded.repeats_ms == pytest.approx(
        [float(np.median(b)) for b in results[0].blocks()], rel=1e-6
    )


def read_run_file_bytes(content: bytes) -> Run:
    from perfguard.store.run_file import parse_run

    return parse_run(content, "test")


@pytest.mark.parametrize("change", [1.0, 1.02, 1.06, 1.1, 1.3, 0.8])
def test_a_compact_baseline_gives_the_verdicts_of_its_raw_samples(change: float) -> None:
    base = run([result("t.py::a", "eager", 1.0, seed=1), result("t.py::b", "x", 2.0, seed=2)])
    head = run(
        [
            result("t.py::a", "eager", change, seed=3),
            result("t.py::b", "x", 2.0 * change, seed=4, spread=0.05),
        ],
        commit="b" * 40,
    )
    compact = read_run_file_bytes(baseline_bytes(base))
    assert compact.results[0].samples_ms == ()
    raw, kept = compare_runs(base, head), compare_runs(compact, head)
    assert [(c.metric, c.verdict) for c in raw] == [(c.metric, c.verdict) for c in kept]
    for a, b in zip(raw, kept, strict=True):
        assert (a.p_value is None) == (b.p_value is None)
        if a.p_value is not None and b.p_value is not None:
            assert b.p_value == pytest.approx(a.p_value, rel=1e-3, abs=1e-12)


def _plain(path: Path, r: Run) -> None:
    """`r` as a results file holds it (`--perfguard-json`), filed as a baseline: plain JSON,
    every sample (as a baseline folder filled by hand, or an older pull's copy, has it)."""
    doc = r.to_json()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))


def test_a_plain_baseline_loads_and_its_commits_next_save_compacts_it(
    tmp_path: Path,
) -> None:
    old = run([result("t.py::a", "eager", 1.0), result("t.py::b", "eager", 1.0)], commit=SHA)
    plain = tmp_path / MACHINE / f"{SHA}.json"
    _plain(plain, old)
    store = BaselineStore(tmp_path)
    loaded = store.load(MACHINE, SHA)
    assert loaded is not None and loaded.results[0].block_stats is not None
    assert compare_runs(loaded, old) == compare_runs(old, old)
    saved = store.save(run([result("t.py::a", "eager", 1.1)], commit=SHA))
    assert Path(saved.path).name == f"{SHA}.json.gz" and saved.kept == 1
    assert not plain.exists()
    again = store.load(MACHINE, SHA)
    assert again is not None and sorted(r.test for r in again.results) == ["t.py::a", "t.py::b"]


def test_baselines_compact_rewrites_every_plain_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shas = [f"{i:040x}" for i in range(3)]
    runs = [run([_fast_result("t.py::a", seed=i)], commit=sha) for i, sha in enumerate(shas)]
    for sha, r in zip(shas, runs, strict=True):
        _plain(tmp_path / MACHINE / f"{sha}.json", r)
    assert main(["baselines", "compact", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "compacted 3 baseline(s)" in out
    assert sorted(p.name for p in (tmp_path / MACHINE).iterdir() if p.is_file()) == [
        f"{sha}.json.gz" for sha in shas
    ]
    for sha, r in zip(shas, runs, strict=True):
        assert read_run_file(tmp_path / MACHINE / f"{sha}.json.gz") == r.compact()
    assert main(["baselines", "compact", "--dir", str(tmp_path)]) == 0
    assert "compacted 0 baseline(s)" in capsys.readouterr().out


def test_a_pushed_compact_file_replaces_the_branchs_plain_copy(
    remote: Path, tmp_path: Path
) -> None:
    one = clone(remote, tmp_path / "one")
    old = run([result("t.py::a", "eager", 1.0)], commit=SHA)
    _plain(one / "baselines" / MACHINE / f"{SHA}.json", old)
    push(one, one / "baselines")
    assert BaselineStore(one / "baselines").compact()
    assert push(one, one / "baselines").added == (f"{MACHINE}/{SHA}.json.gz",)
    files = git(
        tmp_path, "--git-dir", str(remote), "ls-tree", "-r", "--name-only", "perfguard-baselines"
    ).splitlines()
    assert files == [f".summary/{MACHINE}/{SHA}.parquet", f"{MACHINE}/{SHA}.json.gz"]

    two = clone(remote, tmp_path / "two")
    _plain(two / "baselines" / MACHINE / f"{SHA}.json", old)  # an older pull's copy
    assert pull(two, two / "baselines").added == ()  # the commit is here already
    fresh = clone(remote, tmp_path / "fresh")
    pulled = pull(fresh, fresh / "baselines")
    assert pulled.added == (f"{MACHINE}/{SHA}.json.gz",) and pulled.summaries == 1
    loaded = BaselineStore(fresh / "baselines").load(MACHINE, SHA)
    assert loaded == old.compact()


def test_pull_and_push_work_with_a_server_that_sends_whole_files(tmp_path: Path) -> None:
    """A server that does not honour `--filter=blob:none` sends the tip's files whole: pull
    and push still take and send the same files."""
    bare = tmp_path / "plain.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    one = clone(bare, tmp_path / "one")
    git(one, "commit", "-q", "--allow-empty", "-m", "init")
    BaselineStore(one / "baselines").save(run([result("t.py::a", "eager", 1.0)], commit=SHA))
    assert push(one, one / "baselines").added == (f"{MACHINE}/{SHA}.json.gz",)
    two = clone(bare, tmp_path / "two")
    pulled = pull(two, two / "baselines")
    assert pulled.added == (f"{MACHINE}/{SHA}.json.gz",) and pulled.summaries == 1
