"""Accidents and attacks: each test reproduces a fault that once lost or forged data.

A partial save, a shallow clone, a hostile baselines branch, a comment written by someone
else, wrong-type fields, NaN options, a killed A/B session, a full disk: each gets one clear
message and loses nothing.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfguard.cli import main
from perfguard.records import RecordError, Run
from perfguard.store import BaselineStore
from perfguard.store.run_file import BaselineError, read_run_file
from perfguard.store.sync import SyncError, pull, push
from tests import forkserver
from tests.factories import result, run
from tests.gitrepo import clone, commit, git

FAST = (
    "--perfguard-device=cpu",
    "--perfguard-budget=0.02",
    "--perfguard-repeats=3",
    "-p",
    "no:cacheprovider",
)

THREE = """
import pytest, torch

def model(width):
    return torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU()).eval()

@pytest.mark.perfguard(variants=["eager"])
def test_a(perfguard):
    perfguard.run(model(16), (torch.randn(4, 32),))

@pytest.mark.perfguard(variants=["eager"])
def test_b(perfguard):
    perfguard.run(model(24), (torch.randn(4, 32),))

@pytest.mark.perfguard(variants=["eager"])
def test_c(perfguard):
    perfguard.run(model(32), (torch.randn(4, 32),))
"""


def measure(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*FAST, "--perfguard", "--perfguard-compare=none", *args)


@pytest.fixture
def three(pytester: pytest.Pytester) -> Path:
    """A committed 3-test suite on main."""
    pytester.makepyfile(test_three=THREE)
    pytester.path.joinpath(".gitignore").write_text("reports/\n*.json\n__pycache__/\n")
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    commit(pytester.path, "A")
    return pytester.path


def stored_tests(repo: Path) -> set[str]:
    head = git(repo, "rev-parse", "HEAD")
    (path,) = (repo / "baselines").glob(f"*/{head}.json.gz")
    return {r.test.rpartition("::")[2] for r in read_run_file(path).results}


# ---- 1. a save never shrinks what is stored ---------------------------------------------------


@pytest.mark.slow
def test_a_save_of_some_tests_updates_the_stored_baseline_and_keeps_the_rest(
    pytester: pytest.Pytester, three: Path
) -> None:
    assert measure(pytester, "--perfguard-save").ret == 0
    assert stored_tests(three) == {"test_a", "test_b", "test_c"}
    again = measure(pytester, "--perfguard-save", "-k", "test_c")
    assert again.ret == 0, again.stdout.str()
    assert stored_tests(three) == {"test_a", "test_b", "test_c"}
    again.stdout.fnmatch_lines(["*updated baseline*1 result(s) measured, 2 kept*"])

    nothing = measure(pytester, "--perfguard-save", "-k", "nosuch")
    assert stored_tests(three) == {"test_a", "test_b", "test_c"}
    nothing.stdout.fnmatch_lines(["*baseline not saved: nothing was measured*"])

    # an explicit request may shrink it
    replaced = measure(pytester, "--perfguard-save", "--perfguard-save-replace", "-k", "test_c")
    assert replaced.ret == 0, replaced.stdout.str()
    assert stored_tests(three) == {"test_c"}


@pytest.mark.slow
def test_an_interrupted_session_or_a_collection_error_saves_nothing(
    pytester: pytest.Pytester, three: Path
) -> None:
    assert measure(pytester, "--perfguard-save").ret == 0
    head = git(three, "rev-parse", "HEAD")
    (path,) = (three / "baselines").glob(f"*/{head}.json.gz")
    before = path.read_bytes()

    pytester.makepyfile(
        test_bogus="""
import pytest

@pytest.mark.perfguard(bogus=1)
def test_bad(perfguard):
    pass
"""
    )  # untracked: the tree is still clean
    broken = measure(pytester, "--perfguard-save")
    assert broken.ret != 0
    assert path.read_bytes() == before
    broken.stdout.fnmatch_lines(["*baseline not saved*collection*"])
    os.unlink(three / "test_bogus.py")

    pytester.makepyfile(
        test_stop="""
def test_zz_stop():
    raise KeyboardInterrupt
"""
    )
    stopped = measure(pytester, "--perfguard-save", "-p", "no:randomly")
    assert stopped.ret == pytest.ExitCode.INTERRUPTED
    assert path.read_bytes() == before
    stopped.stdout.fnmatch_lines(["*baseline not saved*interrupted*"])


def test_merge_refuses_missing_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = run([result("t.py::a", "eager", 1.0)], commit="a" * 40)
    shard = Run(**{**one.__dict__, "settings": {"shard": "1/2"}})
    path = tmp_path / "shard-1.json"
    path.write_text(json.dumps(shard.to_json()))
    assert main(["merge", str(path), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert "shard 2/2 is missing" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.json").exists()


# ---- 1 and 4. the baselines branch -------------------------------------------------------------


def test_push_never_lets_a_smaller_local_copy_replace_the_branchs(
    remote: Path, tmp_path: Path
) -> None:
    first = clone(remote, tmp_path / "first")
    sha = "1" * 40
    full = run([result("t.py::a", "eager", 1.0), result("t.py::b", "eager", 1.0)], commit=sha)
    BaselineStore(first / "baselines").save(full)
    push(first, first / "baselines")
    second = clone(remote, tmp_path / "second")
    partial = run([result("t.py::a", "eager", 1.0)], commit=sha)
    BaselineStore(second / "baselines").save(partial)
    with pytest.raises(SyncError, match="fewer results than the branch's copy"):
        push(second, second / "baselines")
    # nor one whose results all failed where the branch's were measured
    from perfguard.records import VariantResult

    broken = run(
        [
            VariantResult(test=t, variant="eager", status="error", error="CUDA OOM")
            for t in ("t.py::a", "t.py::b")
        ],
        commit=sha,
    )
    fourth = clone(remote, tmp_path / "fourth")
    BaselineStore(fourth / "baselines").save(broken)
    with pytest.raises(SyncError, match=r"2 result\(s\) that failed or were skipped"):
        push(fourth, fourth / "baselines")
    third = clone(remote, tmp_path / "third")
    pull(third, third / "baselines")
    (path,) = (third / "baselines").glob(f"*/{sha}.json.gz")
    assert [r.status for r in read_run_file(path).results] == ["ok", "ok"]


def _plant(repo: Path, files: dict[str, bytes], branch: str = "perfguard-baselines") -> None:
    """Commit `files` (path -> content) onto the branch with `git mktree`, which takes any
    entry name (`..` too), as an attacker with push access could."""

    def hash_blob(content: bytes) -> str:
        done = subprocess.run(
            ["git", "hash-object", "-w", "--stdin"],
            cwd=repo,
            input=content,
            capture_output=True,
            check=True,
        )
        return done.stdout.decode().strip()

    def make_tree(entries: dict[str, object]) -> str:
        lines = []
        for name, value in entries.items():
            if isinstance(value, dict):
                lines.append(f"040000 tree {make_tree(value)}\t{name}\n")
            else:
                assert isinstance(value, bytes)
                lines.append(f"100644 blob {hash_blob(value)}\t{name}\n")
        done = subprocess.run(
            ["git", "mktree"], cwd=repo, input="".join(lines), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    nested: dict[str, object] = {}
    for path, content in files.items():
        *folders, name = path.split("/")
        here = nested
        for folder in folders:
            here = here.setdefault(folder, {})  # type: ignore[assignment]
        here[name] = content
    made = git(repo, "commit-tree", make_tree(nested), "-m", "planted")
    git(repo, "push", "-q", "origin", f"{made}:refs/heads/{branch}")


def test_pull_writes_only_valid_baseline_files_inside_the_folder(
    remote: Path, tmp_path: Path
) -> None:
    attacker = clone(remote, tmp_path / "attacker")
    made = run([result("t.py::a", "eager", 1.0)], commit="2" * 40)
    good = json.dumps(Run(**{**made.__dict__, "machine": "cpu-x"}).to_json()).encode()
    _plant(
        attacker,
        {
            "cpu-x/" + "2" * 40 + ".json": good,
            "../conftest.py": b"raise SystemExit('planted')\n",
            "cpu-x/../../escape.json": good,
            "cpu-x/notasha.json": good,
            "cpu-x/" + "3" * 40 + ".json": b'{"schema_version": 1, "results": "x"}',
            ".hidden/" + "4" * 40 + ".json": good,
        },
    )
    victim = clone(remote, tmp_path / "victim")
    got = pull(victim, victim / "baselines")
    assert got.added == ("cpu-x/" + "2" * 40 + ".json",)
    assert len(got.refused) == 5
    assert not (victim / "conftest.py").exists() and not (tmp_path / "conftest.py").exists()
    assert not (victim / "escape.json").exists() and not (tmp_path / "escape.json").exists()
    found = sorted(p.relative_to(victim / "baselines").as_posix() for p in victim.rglob("*.json"))
    assert found == ["cpu-x/" + "2" * 40 + ".json"]


def test_push_refuses_files_that_do_not_validate(remote: Path, tmp_path: Path) -> None:
    repo = clone(remote, tmp_path / "repo")
    good = BaselineStore(repo / "baselines").save(
        run([result("t.py::a", "eager", 1.0)], commit="5" * 40)
    )
    bad = Path(good.path).parent / ("6" * 40 + ".json")
    bad.write_text('{"schema_version": 1, "machine": "cpu-x", "results": [{"test": 1}]}')
    with pytest.raises(SyncError, match=f"{'6' * 40}.json"):
        push(repo, repo / "baselines")
    assert git(repo, "ls-remote", "origin", "perfguard-baselines") == ""  # nothing pushed


def test_a_push_a_server_hook_refuses_says_the_servers_reason_at_once(
    remote: Path, tmp_path: Path
) -> None:
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'baselines are frozen this week' >&2\nexit 1\n")
    hook.chmod(0o755)
    repo = clone(remote, tmp_path / "repo")
    BaselineStore(repo / "baselines").save(run([result("t.py::a", "eager", 1.0)], commit="7" * 40))
    started = time.monotonic()
    with pytest.raises(SyncError) as caught:
        push(repo, repo / "baselines")
    assert "baselines are frozen this week" in str(caught.value)
    assert "concurrent" not in str(caught.value)
    assert time.monotonic() - started < 5


# ---- 2. a depth-1 clone -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_depth_1_clone_of_a_pr_merge_commit_explains_itself_and_keeps_the_results(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_three=THREE)
    origin = pytester.path
    git(origin, "init", "-q", "-b", "main")
    git(origin, "add", "-A")
    commit(origin, "A")
    git(origin, "checkout", "-q", "-b", "feature")
    commit(origin, "F")
    git(origin, "checkout", "-q", "main")
    commit(origin, "B")
    git(origin, "merge", "-q", "--no-ff", "feature", "-m", "Merge PR")
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{origin}", str(shallow))
    done = forkserver.run_pytest(shallow, *FAST, "--perfguard", "--perfguard-json=out.json")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out and "GitCommandError" not in out
    doc = json.loads((shallow / "out.json").read_text())
    assert len(doc["results"]) == 3
    assert "fetch-depth: 0" in doc["baseline"]["reason"]
    assert (shallow / "reports" / "perfguard.md").is_file()


# ---- 5. the eager reference belongs to the model measured ----------------------------------------

TWO_SETTINGS = """
import pytest, torch

class Scaled(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.scale = scale
    def forward(self, x):
        return self.lin(x) * self.scale

@pytest.mark.perfguard(variants=["eager"])
def test_one(perfguard):
    torch.manual_seed(1)
    perfguard.run(Scaled(1.0).eval(), (torch.ones(4, 16),))

@pytest.mark.perfguard(variants=["eager"])
def test_three(perfguard):
    torch.manual_seed(1)
    perfguard.run(Scaled(3.0).eval(), (torch.ones(4, 16),))
"""


@pytest.mark.slow
def test_two_models_with_the_same_weights_and_other_settings_get_their_own_reference(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_two=TWO_SETTINGS)
    done = measure(pytester)
    assert done.ret == 0, done.stdout.str()
    done.assert_outcomes(passed=2)


# ---- 7. wrong-type fields in a baseline ----------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("samples_ms", "x"),
        ("environment", "str"),
        ("commit", 12345),
        ("created", 123),
        ("commit", "<img src=x onerror=alert(1)>"),
        ("machine", ["a"]),
        ("settings", [1]),
        ("metrics", "fast"),
        ("status", 7),
        ("block_sizes", ["a"]),
    ],
)
def test_wrong_type_fields_are_one_line_naming_the_file_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: object
) -> None:
    doc = run([result("t.py::a", "eager", 1.0)], commit="a" * 40).to_json()
    if field in doc:
        doc[field] = value
    else:
        doc["results"][0][field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BaselineError, match=r"bad\.json"):
        read_run_file(path)
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_wrong_type_baseline_keeps_the_runs_json_and_report(
    pytester: pytest.Pytester, three: Path
) -> None:
    assert measure(pytester, "--perfguard-save").ret == 0
    (path,) = (three / "baselines").glob("*/*.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["created"] = 123
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    commit(three, "B")
    done = pytester.runpytest_subprocess(*FAST, "--perfguard", "--perfguard-json=out.json")
    assert done.ret == pytest.ExitCode.INTERRUPTED  # 2: broken input, not a regression
    assert "Traceback" not in done.stdout.str() + done.stderr.str()
    done.stdout.fnmatch_lines([f"*comparison stopped: {path}: *created*"])
    assert len(json.loads((three / "out.json").read_text())["results"]) == 3
    assert (three / "reports" / "perfguard.md").is_file()


def test_records_check_their_field_types() -> None:
    with pytest.raises(RecordError, match="commit"):
        run([], commit="12345")
    with pytest.raises(RecordError, match="created"):
        Run(commit=None, machine="m", environment={}, results=(), created=123)  # type: ignore[arg-type]


# ---- 8. NaN and negative options -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("--perfguard-min-change=nan", "between 0 and 1000, got nan"),
        ("--perfguard-min-change=inf", "between 0 and 1000, got inf"),
        ("--perfguard-budget=nan", "between 0.001 and 3600, got nan"),
        ("--perfguard-ab-min-change=nan", "between 0 and 1000, got nan"),
        ("--perfguard-confirm-gap=nan", "between 0 and 3600, got nan"),
        ("--perfguard-min-change=-50", "between 0 and 1000, got -50"),
        ("--perfguard-device=tpu", "'auto', 'cpu' or 'cuda"),  # was each test failing
        ("--perfguard-machine=../escape", "not a usable machine key"),  # a folder out of it
    ],
)
def test_nan_and_negative_options_are_usage_errors(
    pytester: pytest.Pytester, option: str, says: str
) -> None:
    pytester.makepyfile(test_three=THREE)
    done = measure(pytester, option)
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    done.stderr.fnmatch_lines([f"*{option.partition('=')[0]}*{says}*"])


@pytest.mark.slow
def test_a_nan_marker_value_is_an_error_naming_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
import pytest

@pytest.mark.perfguard(min_change_pct=float("nan"))
def test_x(perfguard):
    pass
"""
    )
    done = measure(pytester)
    assert done.ret != 0
    assert (
        "test_x: @pytest.mark.perfguard: min_change_pct: must be between 0 and 1000, got nan"
        in (done.stdout.str() + done.stderr.str())
    )


@pytest.mark.parametrize("value", ["nan", "-50", "inf"])
def test_compare_refuses_a_nan_or_negative_minimum_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    base = tmp_path / "base.json"
    head = tmp_path / "head.json"
    base.write_text(json.dumps(run([result("t.py::a", "eager", 1.0)]).to_json()))
    head.write_text(json.dumps(run([result("t.py::a", "eager", 2.0, seed=1)]).to_json()))
    assert main(["compare", str(base), str(head), f"--min-change={value}"]) == 2
    assert "--min-change" in capsys.readouterr().err


# ---- 9. a killed A/B session ---------------------------------------------------------------------

SLOW_AB = """
import os, pathlib, time, pytest, torch

@pytest.mark.perfguard(variants=["eager"])
def test_slow(perfguard):
    pathlib.Path(os.environ["PIDS"], str(os.getpid())).write_text("")
    time.sleep(120)  # the worker is busy when the driver goes
    perfguard.run(torch.nn.Linear(4, 4).eval(), (torch.randn(2, 4),))
"""


def _ab_session(pytester: pytest.Pytester, tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    pytester.makepyfile(test_slow=SLOW_AB)
    pytester.path.joinpath(".gitignore").write_text("reports/\n__pycache__/\n")
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    base = commit(pytester.path, "A")
    commit(pytester.path, "B")
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "tmp").mkdir()
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            *FAST,
            "--perfguard",
            f"--perfguard-ab={base}",
            "--perfguard-full",
        ],  # B is an empty commit: a partial run would measure nothing
        cwd=pytester.path,
        env={**os.environ, "PIDS": str(pids), "TMPDIR": str(tmp_path / "tmp")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not any(pids.iterdir()):
        assert driver.poll() is None and time.monotonic() < deadline, "no worker started"
        time.sleep(0.2)
    return driver, pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return "\tZ" not in Path(f"/proc/{pid}/status").read_text().split("State:")[1][:4]
    except OSError:
        return False


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


@pytest.mark.slow
def test_sigterm_ends_an_ab_session_with_its_workers_and_worktree(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    driver, pids = _ab_session(pytester, tmp_path)
    assert len(git(pytester.path, "worktree", "list").splitlines()) == 2
    driver.send_signal(signal.SIGTERM)
    driver.wait(timeout=60)
    workers = [int(p.name) for p in pids.iterdir()]
    assert _wait_gone(workers, 30) == []
    assert len(git(pytester.path, "worktree", "list").splitlines()) == 1


@pytest.mark.slow
def test_after_kill_9_the_workers_go_and_the_next_start_prunes_what_it_left(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfguard.worktree import prune_stale

    driver, pids = _ab_session(pytester, tmp_path)
    driver.kill()
    driver.wait()
    workers = [int(p.name) for p in pids.iterdir()]
    assert _wait_gone(workers, 30) == []
    listed = git(pytester.path, "worktree", "list").splitlines()
    assert len(listed) == 2  # left behind by the kill
    stale = Path(listed[1].split()[0])
    left = {p.name.rpartition("-")[0] for p in (tmp_path / "tmp").glob("perfguard-ab-*")}
    assert {"perfguard-ab", "perfguard-ab-logs"} <= left  # the worktree's folder, the logs
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    assert prune_stale(pytester.path) == [stale]
    assert len(git(pytester.path, "worktree", "list").splitlines()) == 1
    assert list((tmp_path / "tmp").glob("perfguard-*")) == []


# ---- 10. smaller ---------------------------------------------------------------------------------


def test_stale_temp_files_are_cleaned_at_the_next_save_and_files_are_readable(
    tmp_path: Path,
) -> None:
    store = BaselineStore(tmp_path / "b")
    first = Path(store.save(run([result("t.py::a", "eager", 1.0)], commit="8" * 40)).path)
    stale = first.parent / f".{'9' * 40}.json.abc123.tmp"
    stale.write_text("{half")
    umask = os.umask(0o022)
    try:
        second = Path(store.save(run([result("t.py::a", "eager", 1.0)], commit="9" * 40)).path)
    finally:
        os.umask(umask)
    assert not stale.exists()
    assert stat.S_IMODE(second.stat().st_mode) == 0o644


@pytest.mark.slow
def test_a_full_disk_is_one_line_not_a_traceback(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_three=THREE)
    pytester.makeconftest(
        """
import errno, os

def _full(fd):
    raise OSError(errno.ENOSPC, "No space left on device")

os.fsync = _full
"""
    )
    done = measure(pytester, "--perfguard-json=out.json")
    out = done.stdout.str() + done.stderr.str()
    assert done.ret == pytest.ExitCode.INTERRUPTED, out
    assert "Traceback" not in out and "INTERNALERROR" not in out
    done.stdout.fnmatch_lines(["*perfguard error: *out.json*No space left on device*"])


def test_the_cli_says_a_full_disk_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "base.json"
    base.write_text(json.dumps(run([result("t.py::a", "eager", 1.0)]).to_json()))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("perfguard.files.os.fsync", full)
    assert main(["compare", str(base), str(base), "--json", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and len(err.strip().splitlines()) == 1


# ---- results files validated where they are read ---------------------------------------------


def _doc_with(path: Path, change: str) -> None:
    doc = run([result("t.py::a", "eager", 1.0)], commit="a" * 40).to_json()
    doc["settings"] = {"thresholds": {"alpha": 0.01, "min_change_pct": 5.0}}
    if change == "string threshold":
        doc["settings"]["thresholds"]["min_change_pct"] = "5; rm -rf /"
    elif change == "NaN threshold":
        doc["settings"]["thresholds"]["min_change_pct"] = float("nan")
    elif change == "thresholds a list":
        doc["settings"]["thresholds"] = [1, 2]
    elif change == "per-test override":
        doc["settings"]["thresholds"]["per_test"] = {"t.py::a": {"alpha": 7}}
    elif change == "warnings a number":
        doc["health"] = {"warnings": 5}
    elif change == "environment a string":
        doc["baseline"]["environment"] = "gpu"
    elif change == "negative latency":
        doc["results"][0]["metrics"]["latency_p50_ms"] = -1.0
    elif change == "test a number":
        doc["results"][0]["test"] = 12345
    elif change == "budget a string":
        doc["settings"]["budget_s"] = "fast"
    elif change == "repeats NaN":
        doc["settings"]["repeats"] = float("nan")
    elif change == "repeats a fraction":
        doc["settings"]["repeats"] = 2.5
    elif change == "unhealthy unknown":
        doc["settings"]["unhealthy"] = 12345
    elif change == "baseline mode a number":
        doc["baseline"]["mode"] = 12345
    elif change.startswith("comparison"):  # a comparison with one field of the wrong type
        row: dict[str, object] = {"test": "t.py::a", "variant": "eager", "metric": "latency_p50_ms"}
        row |= {"baseline": 1.0, "current": 1.0, "change_pct": 0.0, "verdict": "unchanged"}
        key = {"comparison gating": "gating", "comparison detectable": "min_detectable_pct"}
        row[key[change]] = "yes"
        doc["comparisons"] = [row]
    path.write_text(json.dumps(doc))  # NaN is written as NaN, which Python's json reads


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("string threshold", "thresholds.min_change_pct: must be a number"),
        ("NaN threshold", "thresholds.min_change_pct: must be between 0 and 1000, got nan"),
        ("thresholds a list", "thresholds must be an object"),
        ("per-test override", "per_test['t.py::a'].alpha: must be above 0 and below 1"),
        ("warnings a number", "health.warnings must be a list of strings"),
        ("environment a string", "baseline.environment must be an object"),
        ("negative latency", "latency_p50_ms must be 0 or more"),
        # a string or bool() coerced these, and the report printed them
        ("test a number", "test must be a string, got 12345"),
        ("budget a string", "settings.budget_s: must be a number"),
        ("repeats NaN", "settings.repeats: must be a whole number"),
        ("repeats a fraction", "settings.repeats: must be a whole number, got 2.5"),
        ("unhealthy unknown", "settings.unhealthy: must be one of"),
        ("baseline mode a number", "baseline.mode must be a string"),
        ("comparison gating", "gating must be true or false"),
        ("comparison detectable", "min_detectable_pct must be a number or null"),  # a traceback
    ],
)
def test_a_results_file_of_the_wrong_shape_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, said: str
) -> None:
    path = tmp_path / "results.json"
    _doc_with(path, change)
    assert main(["report", str(path), "--exit-code"]) == 2  # never 1, read as a regression
    err = capsys.readouterr().err
    assert str(path) in err and said in err and len(err.strip().splitlines()) == 1
    # a shard of that shape stops the merge, rather than switching the gate off
    assert main(["merge", str(path), "-o", str(tmp_path / "m.json"), "--compare", "none"]) == 2
    assert said in capsys.readouterr().err and not (tmp_path / "m.json").exists()


# ---- a repository that git refuses to read --------------------------------------------------


@pytest.mark.slow
def test_a_repository_git_refuses_keeps_the_measurements_and_says_what_git_said(
    three: Path,
    pytester: pytest.Pytester,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a real refusal that any user can make (another user's checkout, the common one in CI
    # containers, needs root to set up): git will not read a repository of a newer format
    git(three, "config", "core.repositoryformatversion", "99")
    done = measure(pytester, "--perfguard-json=out.json", "--perfguard-report=out.md")
    said = "git refuses to read the repository at"
    assert "Expected git repo version <= 1, found 99" in done.stdout.str()
    assert done.stdout.str().count(said) == 1 and "Traceback" not in done.stdout.str()
    doc = json.loads((three / "out.json").read_text())
    assert len(doc["results"]) == 3 and (three / "out.md").exists()  # nothing measured lost
    # saving asks for the commit: refused before anything is measured, in one line
    refused = measure(pytester, "--perfguard-save")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert said in refused.stderr.str() and "Traceback" not in refused.stderr.str()
    # and the commands that read git say it in one line, exit 2
    monkeypatch.chdir(three)
    capsys.readouterr()
    assert main(["baselines", "pull"]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's checkout needs root")
def test_another_users_checkout_names_the_safe_directory_to_add(tmp_path: Path) -> None:
    from perfguard.git import GitRefused, git_state

    repo = tmp_path / "theirs"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "A")
    for path in [repo, *repo.rglob("*")]:
        os.chown(path, 65534, 65534, follow_symlinks=False)
    with pytest.raises(GitRefused, match=r"dubious ownership.*safe\.directory"):
        git_state(repo)


@pytest.mark.slow
def test_save_replace_alone_is_a_usage_error_not_ignored(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_three=THREE)
    done = measure(pytester, "--perfguard-save-replace")
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    done.stderr.fnmatch_lines(["*--perfguard-save-replace*saves nothing alone*"])


@pytest.mark.slow
def test_a_full_disk_during_a_save_names_the_baseline_folder(
    three: Path, pytester: pytest.Pytester
) -> None:
    pytester.makeconftest(
        """
import errno, os, pytest

def _full(fd):
    raise OSError(errno.ENOSPC, "No space left on device")

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    os.fsync = _full  # the disk fills up as the session ends
"""
    )
    git(three, "add", "-A")
    commit(three, "conftest")
    done = measure(pytester, "--perfguard-save", "--perfguard-baseline-dir=stored")
    out = done.stdout.str() + done.stderr.str()
    assert "could not write None" not in out
    done.stdout.fnmatch_lines(["*baseline not saved: could not write */stored: No space left*"])


def test_alert_refuses_a_newest_window_of_no_commits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--newest -1` looked at no commit and said "no alert": a switched-off alert, silently."""
    assert main(["alert", "--dir", str(tmp_path), "--repo", "o/r", "--newest", "-1"]) == 2
    assert "--newest must be 1 or more, got -1" in capsys.readouterr().err
