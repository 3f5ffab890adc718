"""The summary table: written with each save, read by history instead of the records."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfguard.history.columns import build_series
from perfguard.history.series import order_runs
from perfguard.store import BaselineStore
from perfguard.store.baselines import load_summary as load_folder
from perfguard.store.branch_summary import load_branch
from perfguard.store.summary import SUMMARY_DIR, part_path, read_part, summary_of_runs
from perfguard.store.sync import pull, push
from tests.factories import result, run
from tests.gitrepo import clone, git

MACHINE = "cuda-test-gpu"


def _runs(n: int) -> list:  # type: ignore[type-arg]
    return [
        run(
            [
                result("t.py::a", "eager", 1.0 + 0.01 * i, seed=i),
                result("t.py::a", "compile-default", 0.5, seed=100 + i, compile_s=2.0),
            ],
            commit=f"{i + 1:040x}",
        )
        for i in range(n)
    ]


def _series(found: object) -> list:  # type: ignore[type-arg]
    """The series of `found`, as plain values to compare."""
    return [
        (s.key, s.commits.tolist(), s.values.tolist(), s.low.tolist(), s.high.tolist(), s.pairs)
        for s in build_series(order_runs(found, None, "main"))  # type: ignore[arg-type]
    ]


def test_each_save_writes_its_part_and_history_reads_the_parts(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    runs = _runs(4)
    for r in runs:
        store.save(r)
    parts = sorted((tmp_path / SUMMARY_DIR / MACHINE).glob("*.parquet"))
    assert len(parts) == 4
    rows = read_part(parts[0].read_bytes(), str(parts[0]))
    assert {"latency_p50_ms", "latency_p95_ms", "peak_memory_bytes", "compile_time_s"} <= set(
        rows["metric"]
    )
    p50 = rows[(rows["metric"] == "latency_p50_ms") & (rows["variant"] == "eager")].iloc[0]
    assert p50["low"] < p50["value"] < p50["high"]  # the spread of the repeats' medians

    found = load_folder(tmp_path)
    assert (found.parts_read, found.rebuilt) == (4, 0)
    # the same series as from the records themselves
    assert _series(found) == _series(summary_of_runs([r.compact() for r in runs]))


def test_a_missing_stale_or_broken_part_is_made_again_from_its_record(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    runs = _runs(3)
    for r in runs:
        store.save(r)
    first, second, third = (part_path(tmp_path, MACHINE, r.commit or "") for r in runs)
    first.unlink()  # missing
    second.write_bytes(b"not parquet")  # broken
    third_before = third.read_bytes()
    # the record saved again by a tool that did not write the part: stale
    store.save(run([result("t.py::b", "eager", 3.0)], commit=runs[2].commit or ""))
    third.write_bytes(third_before)
    found = load_folder(tmp_path)
    assert (found.parts_read, found.rebuilt) == (0, 3)
    assert "t.py::b" in set(found.table["test"])
    assert load_folder(tmp_path).rebuilt == 0  # written back


def test_history_on_the_branch_reads_the_parts_and_pull_takes_them(
    remote: Path, tmp_path: Path
) -> None:
    one = clone(remote, tmp_path / "one")
    store = BaselineStore(one / "baselines")
    runs = _runs(3)
    for r in runs:
        store.save(r)
    assert push(one, one / "baselines").summaries == 3
    git(one, "fetch", "-q", "origin", "perfguard-baselines:refs/remotes/origin/perfguard-baselines")
    found = load_branch(one, "origin/perfguard-baselines")
    assert (found.parts_read, found.rebuilt) == (3, 0)
    assert _series(found) == _series(load_folder(one / "baselines"))

    fresh = clone(remote, tmp_path / "fresh")
    pulled = pull(fresh, fresh / "baselines")
    assert (len(pulled.added), pulled.summaries, pulled.refused) == (3, 3, ())
    assert load_folder(fresh / "baselines").rebuilt == 0


def test_pull_refuses_a_part_that_is_not_the_rows_of_its_commit(
    remote: Path, tmp_path: Path
) -> None:
    one = clone(remote, tmp_path / "one")
    store = BaselineStore(one / "baselines")
    a, b = _runs(2)
    store.save(a)
    store.save(b)
    # a part planted under the other commit's name, and one that is no Parquet at all
    pa, pb = (part_path(one / "baselines", MACHINE, r.commit or "") for r in (a, b))
    pb.write_bytes(pa.read_bytes())
    pa.write_bytes(b"PAR1 garbage")
    push(one, one / "baselines")
    fresh = clone(remote, tmp_path / "fresh")
    pulled = pull(fresh, fresh / "baselines")
    assert pulled.summaries == 0 and len(pulled.refused) == 2
    assert any("another machine or commit" in r for r in pulled.refused)
    assert any("not a summary part" in r for r in pulled.refused)
    # history makes both again from the records
    assert load_folder(fresh / "baselines").rebuilt == 2


@pytest.mark.parametrize("bad", [b"", b"PAR1"])
def test_read_part_names_a_file_that_is_not_one(bad: bytes) -> None:
    from perfguard.store.summary import SummaryError

    with pytest.raises(SummaryError, match=r"where\.parquet: not a summary part"):
        read_part(bad, "where.parquet")


@pytest.mark.slow
def test_pull_for_a_run_fetches_its_base_record_and_the_history_parts_alone(
    remote: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perfguard.cli import main
    from perfguard.store.history import load_history
    from tests.gitrepo import commit

    main_repo = clone(remote, tmp_path / "main")
    store = BaselineStore(main_repo / "baselines")
    shas = []
    for i in range(8):  # main: eight commits, each with its baseline on two machines
        shas.append(commit(main_repo, f"c{i}"))
        for machine in (MACHINE, "cpu-other"):
            store.save(
                run([result("t.py::a", "eager", 1.0, seed=i)], commit=shas[-1], machine=machine)
            )
    git(main_repo, "push", "-q", "origin", "HEAD:main")
    push(main_repo, main_repo / "baselines")

    pr = clone(remote, tmp_path / "pr")  # a pull request that branched off c5
    git(pr, "checkout", "-q", "-b", "feature", shas[5])
    commit(pr, "feature work")
    monkeypatch.chdir(pr)
    assert main(["baselines", "pull", "--for", "auto", "--history", "3"]) == 0
    out = capsys.readouterr().out
    assert f"baseline for {MACHINE}: {shas[5][:10]} (merge-base of HEAD with" in out
    assert "pulled 2 baseline(s)" in out and "6 summary part(s)" in out
    records = sorted(p.name for p in (pr / "baselines").glob("*/*.json.gz"))
    assert records == [f"{shas[5]}.json.gz"] * 2
    parts = sorted(p.stem for p in (pr / "baselines" / SUMMARY_DIR / MACHINE).glob("*.parquet"))
    assert parts == sorted(shas[3:6])
    # nothing else of the branch came over the wire: the other records' contents are not
    # in the private repository the pull fetched into
    cache = pr / ".git" / "perfguard" / "baselines.git"
    objects = set(
        git(cache, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()
    )
    other = store.find(MACHINE, shas[7])
    assert other is not None
    from perfguard.store.summary import blob_id

    assert blob_id(other.read_bytes()) not in objects
    # the run's noise floor reads the pulled parts, the record of its base included
    history = load_history(BaselineStore(pr / "baselines"), MACHINE, pr, start=shas[5], last=20)
    assert sorted(history["commit"].unique()) == sorted(shas[3:6])

    # what a PR measured beside its base takes: the base's record, no summary part
    again = clone(remote, tmp_path / "again")
    git(again, "checkout", "-q", "-b", "feature", shas[5])
    commit(again, "feature work")
    monkeypatch.chdir(again)
    assert main(["baselines", "pull", "--for", "auto", "--history", "0"]) == 0
    assert "pulled 2 baseline(s)" in capsys.readouterr().out
    assert not (again / "baselines" / SUMMARY_DIR).exists()
    assert main(["baselines", "pull", "--for", "auto", "--history", "-1"]) == 2
    assert "--history must be 0 or more" in capsys.readouterr().err


@pytest.mark.slow
def test_retain_keeps_the_newest_records_every_part_and_no_history(
    remote: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perfguard.cli import main
    from perfguard.history.series import main_line
    from perfguard.store.retention import retain
    from tests.gitrepo import commit

    repo = clone(remote, tmp_path / "repo")
    store = BaselineStore(repo / "baselines")
    shas = []
    for i in range(6):  # six commits of main, each saved and pushed: six commits on the branch
        shas.append(commit(repo, f"c{i}"))
        store.save(run([result("t.py::a", "eager", 1.0, seed=i)], commit=shas[-1]))
        push(repo, repo / "baselines")
    git(repo, "push", "-q", "origin", "HEAD:main")
    log = ["--git-dir", str(remote), "rev-list", "perfguard-baselines"]
    assert len(git(tmp_path, *log).split()) == 6
    monkeypatch.chdir(repo)
    assert main(["baselines", "retain", "--keep", "2", "--dry-run"]) == 0
    assert "would remove 4 record(s)" in capsys.readouterr().out
    assert len(git(tmp_path, *log).split()) == 6  # a dry run pushes nothing
    assert main(["baselines", "retain", "--keep", "2"]) == 0
    assert "removed 4 record(s)" in capsys.readouterr().out
    assert len(git(tmp_path, *log).split()) == 1  # the history is one commit
    files = git(
        tmp_path, "--git-dir", str(remote), "ls-tree", "-r", "--name-only", "perfguard-baselines"
    ).splitlines()
    assert sorted(f for f in files if f.endswith(".json.gz")) == [
        f"{MACHINE}/{sha}.json.gz" for sha in sorted(shas[4:])
    ]
    assert sum(f.endswith(".parquet") for f in files) == 6  # the summary keeps every commit

    # a clone that saved before the rewrite pushes after it: its baseline lands on top
    late = clone(remote, tmp_path / "late")
    git(late, "checkout", "-q", "main")
    newest = commit(late, "c6")
    BaselineStore(late / "baselines").save(run([result("t.py::a", "eager", 1.0)], commit=newest))
    assert push(late, late / "baselines").added == (f"{MACHINE}/{newest}.json.gz",)
    assert len(git(tmp_path, *log).split()) == 2
    # and history, on a fresh clone, still sees all seven commits from the summary
    fresh = clone(remote, tmp_path / "fresh")
    git(
        fresh,
        "fetch",
        "-q",
        "origin",
        "perfguard-baselines:refs/remotes/origin/perfguard-baselines",
    )
    found = load_branch(fresh, "origin/perfguard-baselines")
    assert len({c for _, c, _ in found.measured()}) == 7
    # a retain whose tip moved meanwhile is made again on the new tip: nothing is lost
    again = retain(repo, keep=1, line=main_line(late, "main", limit=None) or [])
    assert again.pushed and f"{MACHINE}/{newest}.json.gz" in again.kept


def test_retain_folds_the_parts_of_commits_without_a_record_into_month_files(
    remote: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dataclasses import replace

    from perfguard.cli import EXIT_INPUT, main
    from perfguard.store import months, retention
    from perfguard.store.months import Window
    from tests.gitrepo import commit

    monkeypatch.setattr(months, "COMPACT_AT", 4)
    repo = clone(remote, tmp_path / "repo")
    store = BaselineStore(repo / "baselines")
    shas = [commit(repo, f"c{i}") for i in range(6)]
    for i, sha in enumerate(shas):  # two in January, two in February, two in March
        measured = run([result("t.py::a", "eager", 1.0 + i, seed=i)], commit=sha)
        store.save(replace(measured, created=f"2026-0{1 + i // 2}-1{i}T00:00:00+00:00"))
    push(repo, repo / "baselines")
    git(repo, "push", "-q", "origin", "HEAD:main")
    branch = "origin/perfguard-baselines"

    def fetched() -> str:
        git(repo, "fetch", "-q", "origin", f"+perfguard-baselines:refs/remotes/{branch}")
        return branch

    before = _series(load_branch(repo, fetched()))

    assert retention.retain(repo, keep=3, line=shas).folded == 0  # 3 without a record: too few
    done = retention.retain(repo, keep=2, line=shas)
    assert done.folded == 4
    assert done.months == (
        ".summary/cuda-test-gpu/2026-01.parquet",
        ".summary/cuda-test-gpu/2026-02.parquet",
    )
    files = git(repo, "ls-tree", "-r", "--name-only", fetched()).splitlines()
    assert sorted(f for f in files if f.startswith(SUMMARY_DIR)) == sorted(
        [*done.months, *(f"{SUMMARY_DIR}/{MACHINE}/{sha}.parquet" for sha in shas[4:])]
    )
    found = load_branch(repo, branch)
    assert _series(found) == before  # the same history, from two month files and two parts
    assert found.parts_read == 4 and found.rebuilt == 0

    # a push's window reads its commits' files and the months that may hold them alone
    newest = load_branch(repo, branch, window=Window.of([(shas[5], "2026-03-15T00:00:00")]))
    assert newest.parts_read == 1 and set(newest.table["commit"]) == {shas[5]}
    january = load_branch(repo, branch, window=Window.of([(shas[1], "2026-01-20T00:00:00")]))
    assert january.parts_read == 2 and set(january.table["commit"]) == {shas[1]}  # and February
    monkeypatch.chdir(repo)
    assert main(["history", "--branch", branch, "--window", "2"]) == 0
    assert "over 2 commit(s)" in capsys.readouterr().out
    assert main(["history", "--branch", branch, "--window", "0"]) == EXIT_INPUT
    assert "--window must be 1 or more commits, got 0" in capsys.readouterr().err

    # a folded commit measured again: its own record and part, not its month's rows
    store = BaselineStore(tmp_path / "again")
    store.save(run([result("t.py::a", "eager", 9.0, seed=9)], commit=shas[0]))
    push(repo, tmp_path / "again")
    found = load_branch(repo, fetched(), ["latency_p50_ms"])
    first = found.table[found.table["commit"] == shas[0]]
    assert len(first) == 1 and 8.5 < float(first["value"].iloc[0]) < 9.5


def test_a_push_that_lands_while_retain_rewrites_the_branch_is_kept(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfguard.store import gitcache, retention
    from tests.gitrepo import commit

    repo = clone(remote, tmp_path / "repo")
    shas = [commit(repo, f"c{i}") for i in range(3)]
    for sha in shas:
        BaselineStore(repo / "baselines").save(run([result("t.py::a", "eager", 1.0)], commit=sha))
    push(repo, repo / "baselines")
    other = clone(remote, tmp_path / "other")
    racing = "9" * 40
    BaselineStore(other / "baselines").save(run([result("t.py::a", "eager", 1.0)], commit=racing))
    real_fetch = gitcache.fetch_tip
    calls: list[str | None] = []

    def fetch_then_someone_pushes(cache: gitcache.Cache, branch: str) -> str | None:
        tip = real_fetch(cache, branch)
        if not calls:  # between retain's fetch and its push, another job pushes
            calls.append(tip)
            push(other, other / "baselines")
        return tip

    monkeypatch.setattr(gitcache, "fetch_tip", fetch_then_someone_pushes)
    done = retention.retain(repo, keep=1, line=shas)  # oldest first
    assert done.pushed and done.attempts == 2
    files = git(
        tmp_path, "--git-dir", str(remote), "ls-tree", "-r", "--name-only", "perfguard-baselines"
    ).splitlines()
    assert f"{MACHINE}/{racing}.json.gz" in files  # not on main's line: kept
    assert f"{MACHINE}/{shas[2]}.json.gz" in files and f"{MACHINE}/{shas[0]}.json.gz" not in files


def test_the_table_keeps_fractions_to_float32_precision_and_whole_numbers_exactly() -> None:
    import numpy as np

    from perfguard.store.summary import stored

    assert stored(0.1) == float(np.float32(0.1)) and stored(0.1) != 0.1
    assert stored(123_456_789_012_345.0) == 123_456_789_012_345.0  # a count: exact
    assert 0 < abs(stored(1e-300) / 1e-300 - 1) < 2**-23  # float64's range, not float32's
    for special in (0.0, float("inf"), -2.5):
        assert stored(special) == special
    assert np.isnan(stored(float("nan")))


def test_parts_are_dictionary_encoded_and_older_plain_parts_still_read(tmp_path: Path) -> None:
    import pandas as pd

    from perfguard.store.summary import _Buffer, _fastparquet, blob_id, frame, rows_of

    store = BaselineStore(tmp_path)
    old, new = _runs(2)
    store.save(new)
    table = read_part(part_path(tmp_path, MACHINE, new.commit or "").read_bytes(), "new")
    assert isinstance(table["test"].dtype, pd.CategoricalDtype)
    # a part as perfguard wrote them before: plain text columns, figures at full precision
    store.save(old)
    record = store.find(MACHINE, old.commit or "")
    assert record is not None
    buffer = _Buffer()
    rows = frame(rows_of(old, blob_id(record.read_bytes())))
    _fastparquet().write("p", rows, write_index=False, open_with=lambda *_: buffer)
    part_path(tmp_path, MACHINE, old.commit or "").write_bytes(buffer.written)
    found = load_folder(tmp_path)
    assert (found.parts_read, found.rebuilt) == (2, 0)
    assert isinstance(found.table["test"].dtype, pd.CategoricalDtype)
    assert sorted(found.table["commit"].unique()) == sorted([old.commit, new.commit])
    assert len(_series(found)) == len(_series(summary_of_runs([old, new])))


def test_series_follow_mains_order_per_machine_and_leave_out_commits_off_it() -> None:
    shas = [f"{i + 1:040x}" for i in range(4)]
    runs = [
        run([result("t.py::a", "eager", 1.0 + i, seed=i)], commit=sha, machine=machine)
        for i, sha in enumerate(shas)
        for machine in ("m-one", "m-two")
    ]
    runs.append(run([result("t.py::b", "eager", 9.0)], commit=shas[1], machine="m-two"))
    line = [shas[3], shas[0], shas[1]]  # main's order; shas[2] is a branch's commit
    ordered = order_runs(summary_of_runs(reversed(runs)), line, "main")
    assert ordered.left_out == 1
    series = {s.key: s for s in build_series(ordered)}
    one = series[("m-one", "t.py::a", "eager", "latency_p50_ms")]
    assert one.commits.tolist() == line
    assert [round(v) for v in one.values] == [4, 1, 2]  # ~1 + its index, in main's order
    assert [p.commit for p in one.points] == list(line) and len(one.low)
    assert series[("m-two", "t.py::b", "eager", "latency_p50_ms")].commits.tolist() == [shas[1]]
    assert list(series) == sorted(series)  # sorted by machine, test, variant, metric


def test_series_too_many_for_one_sort_key_are_sorted_on_their_codes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where machines x tests x variants x metrics x commits pass what one int64 holds, the
    rows are sorted on the codes themselves, into the same series."""
    from perfguard.history import columns

    shas = [f"{i + 1:040x}" for i in range(5)]
    runs = [
        run(
            [result(f"t.py::{name}", "eager", 1.0 + i, seed=i) for name in ("b", "a", "c")],
            commit=sha,
            machine=machine,
        )
        for i, sha in enumerate(shas)
        for machine in ("m-two", "m-one")
    ]
    line = [shas[4], shas[0], shas[2], shas[1]]  # shas[3] is off main's line
    table = summary_of_runs(runs)

    def built() -> list:  # type: ignore[type-arg]
        found = build_series(order_runs(table, line, "main"))
        return [(s.key, s.commits.tolist(), s.values.tolist(), s.pairs) for s in found]

    one_key = built()
    monkeypatch.setattr(columns, "ONE_KEY_BELOW", 1)
    assert built() == one_key and len(one_key) > 12
    assert all(commits == line for _, commits, _, _ in one_key)


@pytest.mark.slow
def test_a_runs_cost_is_a_series_of_its_own_and_the_site_links_it(tmp_path: Path) -> None:
    """Main's cost per commit: each saved run's runner seconds are a row of the table (a
    series of the run, not of a test), and the trend site links its page from the index."""
    from dataclasses import replace

    from perfguard.history.analysis import analyze
    from perfguard.history.site import page_name, write_site
    from perfguard.records import RunCost
    from perfguard.store.summary import RUN_METRIC, RUN_TEST

    store = BaselineStore(tmp_path / "b")
    for i, r in enumerate(_runs(6)):
        spent = RunCost(
            seconds=60.0 * (i + 1), measure_s=50.0 * (i + 1), confirm_s=10.0 * (i + 1), items=2
        )
        store.save(replace(r, cost=spent))
    found = load_folder(tmp_path / "b")
    ordered = order_runs(found, None, "main")
    (cost,) = [s for s in build_series(ordered) if s.metric == RUN_METRIC]
    assert cost.test == RUN_TEST and cost.values.tolist() == [
        60.0,
        120.0,
        180.0,
        240.0,
        300.0,
        360.0,
    ]
    write_site(analyze(ordered, build_series(ordered)), tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert "runner time per commit" in index and f">{RUN_TEST}<" not in index  # not a test
    page = tmp_path / "site" / page_name(RUN_TEST)
    assert "runner time of the run (min)" in page.read_text()


def test_a_month_file_merges_commits_once_keeps_a_row_group_per_metric_and_names_damage() -> None:
    import io

    from perfguard.store.months import month_bytes, read_month
    from perfguard.store.summary import SummaryError, _fastparquet, frame, rows_of

    runs = _runs(3)
    parts = [frame(rows_of(r.compact(), f"{i:040x}")) for i, r in enumerate(runs)]
    again = frame(rows_of(_runs(1)[0].compact(), "f" * 40))  # the first commit, saved again
    earlier = read_month(month_bytes(parts[:2]), "earlier")  # the month's file so far
    content = month_bytes([earlier, parts[2], again])
    table = read_month(content, "m")
    assert sorted(set(table["commit"])) == sorted(r.commit for r in runs)
    assert set(table[table["commit"] == runs[0].commit]["record"]) == {"f" * 40}  # the later
    metrics = sorted(set(table["metric"]))
    groups = _fastparquet().ParquetFile(io.BytesIO(content)).row_groups
    assert len(groups) == len(metrics)  # so a reader of a few metrics reads theirs alone
    p50 = read_month(content, "m", ["latency_p50_ms"])
    assert set(p50["metric"]) == {"latency_p50_ms"} and len(p50) == 6
    with pytest.raises(SummaryError, match="m: not a summary month file"):
        read_month(content[:100], "m")
