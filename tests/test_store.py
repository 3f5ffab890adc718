from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path

import pytest

from perfguard.records import SCHEMA_VERSION
from perfguard.store import BaselineError, BaselineStore, read_run_file
from tests.factories import result, run

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_save_load_and_list(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    r = run([result("t.py::a", "eager", 1.0), result("t.py::b", "eager", 1.0)], commit=SHA)
    path = store.save(r).path
    assert path == tmp_path / "cuda-test-gpu" / f"{SHA}.json.gz"
    assert store.load("cuda-test-gpu", SHA) == r.compact()
    assert store.load("cuda-test-gpu", "f" * 40) is None
    (info,) = store.list()
    assert (info.machine, info.commit, info.tests) == ("cuda-test-gpu", SHA, 2)
    assert not list(tmp_path.glob("**/*.tmp"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"schema_version": 1, "machine": "m", "resul', "looks truncated"),
        ("not json at all", "not valid JSON"),
        ('{"schema_version": 99, "machine": "m", "results": []}', "upgrade perfguard"),
        ('{"schema_version": 0, "machine": "m", "results": []}', "unknown to this perfguard"),
        ('{"machine": "m"}', "no integer schema_version"),
        ('{"schema_version": 1, "results": []}', "pre-release perfguard"),
        ('{"schema_version": 11, "results": []}', "not a perfguard results file"),
    ],
)
def test_bad_files_name_themselves_and_stay_untouched(
    tmp_path: Path, content: str, message: str
) -> None:
    store = BaselineStore(tmp_path)
    path = tmp_path / "cuda-test-gpu" / f"{SHA}.json"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(BaselineError) as err:
        store.load("cuda-test-gpu", SHA)
    assert str(path) in str(err.value) and message in str(err.value)
    with pytest.raises(BaselineError):
        store.save(run([result("t.py::a", "eager", 1.0)], commit=SHA))
    assert path.read_text() == content


def test_a_good_baseline_can_be_refreshed(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(run([result("t.py::a", "eager", 1.0)], commit=SHA))
    store.save(run([result("t.py::a", "eager", 2.0)], commit=SHA))
    loaded = store.load("cuda-test-gpu", SHA)
    assert loaded is not None and loaded.results[0].metrics.latency_p50_ms is not None
    assert loaded.results[0].metrics.latency_p50_ms > 1.5


def _save_one(root: str, i: int) -> None:
    """One writer process: the baseline of commit SHA, with a test of its own."""
    BaselineStore(Path(root)).save(run([result(f"t.py::w{i}", "eager", 1.0 + i)], commit=SHA))


@pytest.mark.slow
def test_writers_of_one_baseline_take_turns_and_lose_nothing(tmp_path: Path) -> None:
    # six processes save the same commit's baseline at once (shards finishing together):
    # each save reads, merges and replaces the one file under the store's lock
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_save_one, args=(str(tmp_path), i)) for i in range(6)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=120)
    assert [w.exitcode for w in writers] == [0] * 6
    stored = BaselineStore(tmp_path).load("cuda-test-gpu", SHA)
    assert stored is not None
    assert sorted(r.test for r in stored.results) == [f"t.py::w{i}" for i in range(6)]
    assert not list(tmp_path.rglob("*.tmp*"))  # no temporary file left behind


def test_threads_saving_different_commits_all_land(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    runs = [run([result(f"t.py::{i}", "eager", 1.0 + i)], commit=f"{i:040x}") for i in range(8)]
    threads = [threading.Thread(target=store.save, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.list()) == 8


def test_keys_are_checked(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    with pytest.raises(BaselineError, match="full commit sha"):
        store.path("m", "abc123")
    with pytest.raises(BaselineError, match="machine key"):
        store.path("../x", SHA)


def test_read_run_file_reads_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(run([result("t.py::a", "eager", 1.0)]).to_json()))
    assert read_run_file(path).results[0].test == "t.py::a"
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION


def test_a_record_that_unpacks_past_any_real_one_is_refused_not_unpacked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    from perfguard.store import baselines, unpack

    monkeypatch.setattr(unpack, "MAX_UNPACKED", 2**20)  # a 1 MiB cap stands for 512 MiB
    bomb = tmp_path / "cuda-test-gpu" / f"{SHA}.json.gz"
    bomb.parent.mkdir()
    bomb.write_bytes(gzip.compress(b" " * (3 * 2**20)))  # 3 KB that unpack to 3 MiB
    with pytest.raises(BaselineError, match="unpacks to more than 1 MiB"):
        read_run_file(bomb)
    good = tmp_path / "good.json.gz"
    good.write_bytes(baselines.baseline_bytes(run([result("t.py::a", "eager", 1.0)], commit=SHA)))
    assert read_run_file(good).commit == SHA  # a real record still reads
