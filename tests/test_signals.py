"""Signals at the edges of a measuring session, and what a killed A/B session leaves behind.

Each signal is sent by the session to itself at the named moment (an import hook, a test
body), so the moment is exact on a busy machine too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfguard import scratch
from tests.gitrepo import commit, git

FAST = ("--perfguard-device=cpu", "--perfguard-budget=0.02", "--perfguard-repeats=3")

INTERRUPT_TORCH_IMPORT = """
import os, signal, sys

# Ctrl-C's own handler, however this suite was started (a shell's background job, as CI may
# start it, inherits SIGINT ignored, and Python keeps it so)
signal.signal(signal.SIGINT, signal.default_int_handler)

class Interrupt:
    # the signal lands halfway through `import torch`: some of its operator libraries are
    # registered, the rest are not
    def find_spec(self, name, path=None, target=None):
        if name == "torch._prims":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.{name})
        return None

sys.meta_path.insert(0, Interrupt())
"""

ONE = """
import torch

def test_one(perfguard):
    perfguard.run(torch.nn.Linear(8, 8).eval(), (torch.randn(2, 8),))
"""


@pytest.mark.slow
@pytest.mark.fresh_interpreter  # torch's import is the moment
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_while_collection_imports_torch_ends_the_session_with_its_json(
    pytester: pytest.Pytester, name: str
) -> None:
    pytester.makeconftest(INTERRUPT_TORCH_IMPORT.replace("{name}", name))
    pytester.makepyfile(test_one=ONE)
    done = pytester.runpytest_subprocess(*FAST, "--perfguard", "--perfguard-json=out.json")
    out = done.stdout.str() + done.stderr.str()
    assert done.ret == pytest.ExitCode.INTERRUPTED, out
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    assert "Warning" not in out, out  # a hook wrapper that re-raised the interrupt
    assert json.loads((pytester.path / "out.json").read_text())["results"] == []
    done.stdout.fnmatch_lines(["*KeyboardInterrupt*"])


@pytest.mark.slow
def test_sigterm_during_a_plain_save_says_nothing_was_saved_and_keeps_the_results(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_two="""
import os, signal, torch

def test_a(perfguard):
    perfguard.run(torch.nn.Linear(8, 8).eval(), (torch.randn(2, 8),))
    os.kill(os.getpid(), signal.SIGTERM)  # a cancelled CI job

def test_b(perfguard):
    perfguard.run(torch.nn.Linear(8, 8).eval(), (torch.randn(2, 8),))
"""
    )
    pytester.path.joinpath(".gitignore").write_text("reports/\n*.json\n__pycache__/\n")
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    commit(pytester.path, "A")
    done = pytester.runpytest_subprocess(
        *FAST,
        "--perfguard",
        "--perfguard-save",
        "--perfguard-json=out.json",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
    )
    assert done.ret == pytest.ExitCode.INTERRUPTED
    done.stdout.fnmatch_lines(
        ["*baseline not saved: the session was interrupted*", "*SIGTERM received*"]
    )
    results = json.loads((pytester.path / "out.json").read_text())["results"]
    assert [r["test"].rpartition("::")[2] for r in results] == ["test_a"]
    assert not (pytester.path / "baselines").exists()


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--dist", "load", "--tx", "2*popen"], ["-n", "2"]])
def test_xdist_in_any_spelling_is_one_usage_error_not_a_respawn_loop(
    pytester: pytest.Pytester, flags: list[str]
) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_one=ONE)
    done = pytester.runpytest_subprocess(*FAST, "--perfguard", *flags, timeout=120)
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot run under pytest-xdist" in done.stderr.str()
    assert "replacing crashed worker" not in done.stdout.str()


# ---- what a killed A/B session leaves in the temporary directory --------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_prune_removes_folders_whose_session_is_gone_and_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    mine = scratch.make(f"{scratch.PREFIX}logs-")  # this session: alive
    dead = scratch.make(f"{scratch.PREFIX}sock-")
    (dead / scratch.OWNER).write_text(f"{_dead_pid()}\n")
    kept = scratch.make(f"{scratch.PREFIX}logs-")
    (kept / "base.log").write_text("the worker crashed here")
    scratch.give_up(kept)  # a crash's logs, named in its message
    old = scratch.make()
    scratch.give_up(old)
    week_ago = time.time() - scratch.KEPT_S - 60
    os.utime(old, (week_ago, week_ago))
    other = tmp_path / "someone-else"
    other.mkdir()

    assert sorted(scratch.prune()) == sorted([dead, old])
    assert mine.exists() and kept.exists() and other.exists()
    assert (kept / "base.log").read_text() == "the worker crashed here"


def test_prune_never_raises_on_an_unreadable_temporary_directory(tmp_path: Path) -> None:
    assert scratch.prune(tmp_path / "missing") == []


@pytest.mark.parametrize("depth", [0, 12])
def test_the_workers_socket_binds_under_a_temporary_directory_of_any_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, depth: int
) -> None:
    import shutil
    import threading

    from perfguard.pytest_plugin.ab import channel

    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * depth)
    deep.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr("tempfile.tempdir", str(deep))
    listener, (address, key), folder = channel.open_listener()
    try:
        accepted: list[object] = []
        waiter = threading.Thread(target=lambda: accepted.append(listener.accept()))
        waiter.start()
        conn = channel.connect(address, key)
        assert conn is not None
        waiter.join(timeout=30)
        conn.send({"kind": "hello"})
        assert accepted[0].recv() == {"kind": "hello"}  # type: ignore[attr-defined]
        assert "\0" not in address  # an environment variable holds no NUL
        if depth:  # too deep for a socket file: Linux's abstract namespace
            assert address.startswith(channel.ABSTRACT)
    finally:
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


SLOW_TORCH_IMPORT = """
import sys, time

class Slow:
    # a busy runner: importing torch takes seconds; the wait lands halfway through it
    def find_spec(self, name, path=None, target=None):
        if name == "torch._prims":
            sys.meta_path.remove(self)
            time.sleep(2)  # twice the limits below
        return None

sys.meta_path.insert(0, Slow())
"""


@pytest.mark.slow
@pytest.mark.fresh_interpreter  # torch's import is the moment
def test_an_items_limit_does_not_bound_importing_torch_and_an_import_limit_never_splits_it(
    pytester: pytest.Pytester,
) -> None:
    """A short item limit, and an import of torch slower than it: the import is bounded by
    the import limit, not the item's, and that limit's signal waits until torch's own import
    is whole: the module is then a collection error, and the session writes its results."""
    pytester.makeconftest(SLOW_TORCH_IMPORT)
    pytester.makepyfile(test_one=ONE)
    done = pytester.runpytest_subprocess(
        *FAST,
        "--perfguard",
        "--perfguard-variants=eager",
        "--perfguard-timeout=1",
        "--perfguard-json=out.json",
    )
    assert done.ret == 0, done.stdout.str()
    assert json.loads((pytester.path / "out.json").read_text())["results"][0]["status"] == "ok"
    done = pytester.runpytest_subprocess(
        *FAST,
        "--perfguard",
        "--perfguard-variants=eager",
        "--perfguard-import-timeout=1",
        "--perfguard-json=out.json",
    )
    out = done.stdout.str() + done.stderr.str()
    assert done.ret != 0 and "Traceback" not in out and "INTERNALERROR" not in out, out
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [g["kind"] for g in doc["incomplete"]] == ["collection_error"], doc["incomplete"]
    assert "import limit of 1 s" in doc["incomplete"][0]["detail"]


def test_a_modules_import_has_a_grace_that_outlasts_torch_importing_on_a_busy_runner() -> None:
    from perfguard.watchdog import grace

    assert grace(1.0) == 5.0 and grace(100.0) == 25.0 and grace(1000.0) == 60.0
    # the session's timer waits for torch's own import: beside two CPU hogs that alone took
    # more than 5 s past a 1-s import limit, and the module was ended as hung in native code
    assert grace(1.0, "collection_error") == 30.0
    assert grace(1000.0, "collection_error") == 60.0
