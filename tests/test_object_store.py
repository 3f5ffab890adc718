"""Baselines in an object store: the folder's store tests, run again against a real
S3-compatible server (moto's server mode on 127.0.0.1) through s3fs, the client users get."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from perfguard.cli import main
from perfguard.pipeline import FinishSettings, Measured, finish_run
from perfguard.store import BaselineError, BaselineStore
from perfguard.store.history import load_history
from perfguard.store.location import location
from perfguard.store.objects import ObjectStore, ObjectStoreError, open_store
from perfguard.store.summary import blob_id, read_part
from tests.factories import result, run
from tests.gitrepo import commit, git

SHA = "0123456789abcdef0123456789abcdef01234567"
MACHINE = "cuda-test-gpu"


@pytest.fixture(params=["folder", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """The same tests on a folder and on a bucket."""
    if request.param == "folder":
        return tmp_path / "baselines"
    url: str = request.getfixturevalue("s3_url")
    return url


def _objects(url: str) -> ObjectStore:
    return ObjectStore(url)


def _put_raw(url: str, path: str, content: bytes) -> None:
    store = _objects(url)
    store.fs.pipe_file(f"{store.prefix}/{path}", content)


def _get_raw(url: str, path: str) -> bytes:
    store = _objects(url)
    return bytes(store.fs.cat_file(f"{store.prefix}/{path}"))


@pytest.mark.slow
def test_save_load_and_list(where: Path | str) -> None:
    store = open_store(where)
    r = run([result("t.py::a", "eager", 1.0), result("t.py::b", "eager", 1.0)], commit=SHA)
    saved = store.save(r)
    assert str(saved.path) == f"{where}/{MACHINE}/{SHA}.json.gz"
    again = open_store(where)  # another job: nothing remembered
    assert again.has(MACHINE, SHA) and not again.has(MACHINE, "f" * 40)
    assert again.load(MACHINE, SHA) == r.compact()
    assert again.load(MACHINE, "f" * 40) is None
    (info,) = again.list()
    assert (info.machine, info.commit, info.tests) == (MACHINE, SHA, 2)


@pytest.mark.slow
def test_a_save_updates_the_commits_record_and_never_shrinks_it(where: Path | str) -> None:
    store = open_store(where)
    store.save(run([result("t.py::a", "eager", 1.0), result("t.py::b", "eager", 1.0)], commit=SHA))
    done = open_store(where).save(run([result("t.py::a", "eager", 2.0)], commit=SHA))
    assert (done.measured, done.kept, done.updated) == (1, 1, True)
    loaded = open_store(where).load(MACHINE, SHA)
    assert loaded is not None
    figures = {r.test: r.metrics.latency_p50_ms for r in loaded.results}
    assert figures["t.py::a"] == pytest.approx(2.0, rel=0.01) and "t.py::b" in figures
    open_store(where).save(run([result("t.py::c", "eager", 1.0)], commit=SHA), replace_all=True)
    replaced = open_store(where).load(MACHINE, SHA)
    assert replaced is not None and [r.test for r in replaced.results] == ["t.py::c"]


@pytest.mark.slow
def test_concurrent_saves_of_one_commit_lose_nothing(s3_url: str) -> None:
    # six jobs save the same commit's baseline at once (shards finishing together): each
    # reads, merges and writes only if the record is still the one it read
    errors: list[BaseException] = []

    def save(i: int) -> None:
        try:
            ObjectStore(s3_url, attempts=30).save(
                run([result(f"t.py::w{i}", "eager", 1.0 + i)], commit=SHA)
            )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    store = ObjectStore(s3_url)
    stored = store.load(MACHINE, SHA)
    assert stored is not None
    assert sorted(r.test for r in stored.results) == [f"t.py::w{i}" for i in range(6)]
    # the summary part was left matching the record that stands
    record = _get_raw(s3_url, f"{MACHINE}/{SHA}.json.gz")
    part = read_part(_get_raw(s3_url, f".summary/{MACHINE}/{SHA}.parquet"), "part")
    assert set(part["record"]) == {blob_id(record)}
    assert set(part["test"]) == {f"t.py::w{i}" for i in range(6)}


@pytest.mark.slow
def test_a_save_that_loses_the_race_reads_the_winner_and_merges(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # between this save's read and its write, another job saves the same commit
    ObjectStore(s3_url).save(run([result("t.py::first", "eager", 1.0)], commit=SHA))
    slow = ObjectStore(s3_url)
    real_read = slow.read
    raced: list[bool] = []

    def read_then_lose(paths: list[str]) -> dict[str, bytes]:
        got = real_read(paths)
        if not raced:
            raced.append(True)
            ObjectStore(s3_url).save(run([result("t.py::other", "eager", 1.0)], commit=SHA))
        return got

    monkeypatch.setattr(slow, "read", read_then_lose)
    slow.save(run([result("t.py::slow", "eager", 1.0)], commit=SHA))
    stored = ObjectStore(s3_url).load(MACHINE, SHA)
    assert stored is not None
    assert sorted(r.test for r in stored.results) == ["t.py::first", "t.py::other", "t.py::slow"]


@pytest.mark.slow
def test_a_corrupt_record_names_itself_and_stays_untouched(where: Path | str) -> None:
    content = b'{"schema_version": 5, "machine": "m", "resul'
    if isinstance(where, Path):
        (where / MACHINE).mkdir(parents=True)
        (where / MACHINE / f"{SHA}.json").write_bytes(content)
    else:
        _put_raw(where, f"{MACHINE}/{SHA}.json", content)
    with pytest.raises(BaselineError) as err:
        open_store(where).load(MACHINE, SHA)
    assert f"{where}/{MACHINE}/{SHA}.json" in str(err.value)
    assert "looks truncated" in str(err.value)
    with pytest.raises(BaselineError):
        open_store(where).save(run([result("t.py::a", "eager", 1.0)], commit=SHA))
    if isinstance(where, Path):
        assert (where / MACHINE / f"{SHA}.json").read_bytes() == content
    else:
        assert _get_raw(where, f"{MACHINE}/{SHA}.json") == content


@pytest.mark.slow
def test_the_summary_leaves_a_broken_record_out_and_names_it(where: Path | str) -> None:
    good = run([result("t.py::a", "eager", 1.0)], commit="1" * 40)
    open_store(where).save(good)
    content = b'{"schema_version": 5, "machine": "m", "resul'
    if isinstance(where, Path):
        (where / MACHINE / f"{SHA}.json").write_bytes(content)
    else:
        _put_raw(where, f"{MACHINE}/{SHA}.json", content)
    found = open_store(where).summary()
    assert set(found.table["commit"]) == {"1" * 40}
    (skipped,) = found.skipped
    assert f"{MACHINE}/{SHA}.json" in skipped and "looks truncated" in skipped


@pytest.mark.slow
def test_prune_keeps_the_newest_records_and_the_summary(where: Path | str) -> None:
    store = open_store(where)
    shas = [f"{i:040x}" for i in range(1, 5)]
    for i, sha in enumerate(shas):
        r = run([result("t.py::a", "eager", 1.0 + i)], commit=sha)
        store.save(r.__class__(**{**r.__dict__, "created": f"2026-11-2{i}T00:00:00+00:00"}))
    removed = open_store(where).prune(2)
    assert sorted(i.commit for i in removed) == shas[:2]
    left = open_store(where)
    assert [i.commit for i in sorted(left.list(), key=lambda i: i.commit)] == shas[2:]
    table = left.summary().table
    assert set(table["commit"]) == set(shas)  # history keeps every commit


@pytest.mark.slow
def test_prune_folds_older_parts_into_month_files_and_a_window_reads_its_own(
    where: Path | str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfguard.cli import main
    from perfguard.store import months
    from perfguard.store.months import Window

    monkeypatch.setattr(months, "COMPACT_AT", 2)
    store = open_store(where)
    shas = [f"{i:040x}" for i in range(1, 5)]
    for i, sha in enumerate(shas):  # two in October, two in November
        r = run([result("t.py::a", "eager", 1.0 + i)], commit=sha)
        store.save(r.__class__(**{**r.__dict__, "created": f"2026-{10 + i // 2}-2{i}T00:00"}))
    before = open_store(where).summary().table
    october = f".summary/{MACHINE}/2026-10.parquet"
    assert main(["baselines", "prune", "--keep", "2", "--dir", str(where)]) == 0
    said = capsys.readouterr().out
    assert f"folded 2 summary part(s) of commits without a record into {october}" in said
    left = open_store(where)
    found = left.summary()
    assert found.parts_read == 3  # the two newest commits' parts and October's file

    def rows(table: Any) -> list[tuple[str, str, float]]:
        return sorted(zip(table["commit"], table["metric"], table["value"], strict=True))

    assert rows(found.table) == rows(before)  # the same rows, from fewer files
    window = left.summary(window=Window.of([(shas[3], "2026-11-23T00:00:00")]))
    assert window.parts_read == 1 and set(window.table["commit"]) == {shas[3]}


@pytest.mark.slow
def test_compact_rewrites_an_older_plain_record(where: Path | str) -> None:
    r = run([result("t.py::a", "eager", 1.0)], commit=SHA)
    plain = (json.dumps(r.to_json()) + "\n").encode()
    if isinstance(where, Path):
        (where / MACHINE).mkdir(parents=True)
        (where / MACHINE / f"{SHA}.json").write_bytes(plain)
    else:
        _put_raw(where, f"{MACHINE}/{SHA}.json", plain)
    (done,) = open_store(where).compact()
    assert str(done.new).endswith(f"{SHA}.json.gz") and done.after < done.before
    store = open_store(where)
    assert [Path(str(i.path)).name for i in store.list()] == [f"{SHA}.json.gz"]
    assert store.load(MACHINE, SHA) == r.compact()


@pytest.mark.slow
def test_history_reads_the_parts_and_rebuilds_a_missing_one(s3_url: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    store = ObjectStore(s3_url)
    shas = []
    for i in range(4):
        (repo / "f.txt").write_text(str(i))
        git(repo, "add", "f.txt")
        shas.append(commit(repo, f"c{i}"))
        store.save(run([result("t.py::a", "eager", 1.0 + i)], commit=shas[-1]))
    store.fs.rm(f"{store.prefix}/.summary/{MACHINE}/{shas[1]}.parquet")
    fresh = ObjectStore(s3_url)
    history = load_history(fresh, MACHINE, repo, start=shas[-1], last=3)
    p50 = history[history["metric"] == "latency_p50_ms"].sort_values("position")
    assert list(p50["commit"]) == shas[1:]
    assert list(p50["value"]) == pytest.approx([2.0, 3.0, 4.0], rel=0.01)
    # the missing part was made again from its record, for the next reader
    assert fresh.fs.exists(f"{fresh.prefix}/.summary/{MACHINE}/{shas[1]}.parquet")
    summary = ObjectStore(s3_url).summary()
    assert summary.rebuilt == 0 and set(summary.table["commit"]) == set(shas)


@pytest.mark.slow
def test_a_run_compares_with_and_saves_to_the_bucket(s3_url: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "f.txt").write_text("base")
    git(repo, "add", "f.txt")
    base = commit(repo, "base")
    ObjectStore(s3_url).save(run([result("t.py::a", "eager", 1.0)], commit=base))
    (repo / "f.txt").write_text("head")
    git(repo, "commit", "-q", "-am", "head")
    settings = FinishSettings(
        root=repo, baseline_dir=location(s3_url), machine=MACHINE, save=True, confirm=0
    )
    head = [result("t.py::a", "eager", 3.0)]
    outcome = finish_run(Measured(head, {"device": "Test GPU"}), settings)
    assert outcome.error is None
    assert outcome.run.baseline is not None and outcome.run.baseline.commit == base
    verdicts = {c.metric: c.verdict for c in outcome.run.comparisons}
    assert verdicts["latency_p50_ms"] == "regression"
    head_sha = git(repo, "rev-parse", "HEAD").strip()
    assert str(outcome.saved_path) == f"{s3_url}/{MACHINE}/{head_sha}.json.gz"
    assert ObjectStore(s3_url).has(MACHINE, head_sha)


def test_the_commands_take_a_bucket(s3_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    ObjectStore(s3_url).save(run([result("t.py::a", "eager", 1.0)], commit=SHA))
    assert main(["baselines", "list", "--dir", s3_url]) == 0
    assert SHA[:12] in capsys.readouterr().out
    assert main(["baselines", "push", "--dir", s3_url]) == 2
    assert "read and written in place" in capsys.readouterr().err


@pytest.mark.slow
def test_stray_objects_are_not_baselines(s3_url: str) -> None:
    ObjectStore(s3_url).save(run([result("t.py::a", "eager", 1.0)], commit=SHA))
    _put_raw(s3_url, "conftest.py", b"raise SystemExit")
    _put_raw(s3_url, f"{MACHINE}/notes.txt", b"hello")
    _put_raw(s3_url, f"{MACHINE}/{'f' * 12}.json.gz", gzip.compress(b"{}"))
    assert [i.commit for i in ObjectStore(s3_url).list()] == [SHA]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("no-credentials", "no usable credentials"),
        ("no-bucket", "no such bucket"),
    ],
)
def test_a_store_that_cannot_be_used_says_why(
    s3_url: str, monkeypatch: pytest.MonkeyPatch, setup: str, message: str
) -> None:
    url = s3_url
    if setup == "no-credentials":
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    else:
        url = "s3://perfguard-no-such-bucket/baselines"
    with pytest.raises(ObjectStoreError, match=message) as err:
        ObjectStore(url).has(MACHINE, SHA)
    assert url in str(err.value)
    with pytest.raises(ObjectStoreError, match=message):
        ObjectStore(url).save(run([result("t.py::a", "eager", 1.0)], commit=SHA))


def test_a_store_without_its_client_or_conditional_writes_is_refused() -> None:
    with pytest.raises(ObjectStoreError, match=r"pip install gcsfs"):
        ObjectStore("gs://bucket/baselines")
    memory = ObjectStore("memory://perfguard-test/baselines")
    with pytest.raises(ObjectStoreError, match="s3:// stores only"):
        memory.save(run([result("t.py::a", "eager", 1.0)], commit=SHA))


@pytest.mark.slow
def test_the_plugin_refuses_a_store_it_cannot_open(pytester: Any) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    done = pytester.runpytest_subprocess(
        "--perfguard", "--perfguard-baseline-dir=gs://bucket/baselines"
    )
    assert done.ret == 4  # a usage error, before anything is measured
    done.stderr.fnmatch_lines(["*--perfguard-baseline-dir: gs://bucket/baselines*gcsfs*"])


@pytest.mark.slow
def test_a_session_that_does_not_measure_never_opens_the_store(pytester: Any) -> None:
    # the store named in the ini file is perfguard's business: a plain pytest run must not
    # need its client, nor pay for starting one
    pytester.makeini("[pytest]\nperfguard_baseline_dir = gs://bucket/baselines\n")
    pytester.makepyfile("def test_a():\n    pass\n")
    done = pytester.runpytest_subprocess()
    assert done.ret == 0


def test_a_folder_is_still_a_folder(tmp_path: Path) -> None:
    assert location(f"file://{tmp_path}") == tmp_path
    assert isinstance(open_store(location(str(tmp_path))), BaselineStore)


@pytest.mark.slow  # a second or more
def test_a_store_that_does_not_answer_is_given_up_on_within_its_budget(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that accepts connections and never answers: each request waits its read
    timeout, is tried the budget's times, and the call ends with one line."""
    import socket
    import threading
    import time

    from perfguard.store import objects

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def hold() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                continue

    threading.Thread(target=hold, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setattr(objects, "READ_TIMEOUT_S", 0.2)
    started = time.monotonic()
    try:
        with pytest.raises(ObjectStoreError) as err:
            ObjectStore(s3_url).has(MACHINE, SHA)
    finally:
        stop.set()
        for conn in held:
            conn.close()
        silent.close()
    spent = time.monotonic() - started
    assert spent < 20, spent  # 3 tries of 0.2 s and backoff, not 25 tries
    assert s3_url in str(err.value) and "\n" not in str(err.value)
    assert "timeout" in str(err.value).lower()
