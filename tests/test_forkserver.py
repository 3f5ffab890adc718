"""The fork server the tests' pytest sessions start from (`tests.forkserver`): a forked session
is a process of its own that sees what a new interpreter would, and ends as one would."""

from __future__ import annotations

import os
import signal

import pytest

from tests import forkserver

PROBE = """
import os, sys

def test_probe():
    print("cwd", os.getcwd())
    print("env", os.environ.get("PROBE_VALUE"))
    print("path0", sys.path[0])
    print("main", sys.modules["__main__"].__spec__.name)
    print("dynamo", "torch._dynamo" in sys.modules)
    print("ppid", os.getppid())
    assert os.environ.get("PROBE_FAIL") != "1"
"""


@pytest.mark.slow
def test_a_forked_session_sees_its_folder_environment_and_path_and_says_how_it_ended(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_probe=PROBE)
    monkeypatch.setenv("PROBE_VALUE", "given")
    done = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert done.ret == 0, done.stdout.str() + done.stderr.str()
    done.stdout.fnmatch_lines(
        [
            f"*cwd {pytester.path}",
            "env given",
            f"path0 {pytester.path}",
            "main pytest.__main__",
            f"dynamo {not forkserver.fresh_interpreters()}",  # the compiler comes with a fork
        ]
    )
    # forked by the server, not started by this process (unless asked for fresh interpreters)
    [ppid] = [line.split()[1] for line in done.outlines if line.startswith("ppid ")]
    assert (int(ppid) == os.getpid()) == forkserver.fresh_interpreters()
    monkeypatch.setenv("PROBE_FAIL", "1")
    assert (
        pytester.runpytest_subprocess("-p", "no:cacheprovider").ret == pytest.ExitCode.TESTS_FAILED
    )


@pytest.mark.slow
def test_a_forked_session_that_overruns_its_timeout_is_killed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sleep="import time\n\ndef test_sleep():\n    time.sleep(60)\n")
    with pytest.raises(pytester.TimeoutExpired):
        pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=2)
    # the server is free again, and its next session runs
    pytester.makepyfile(test_sleep="def test_sleep():\n    pass\n")
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider").ret == 0


@pytest.mark.slow
def test_a_session_killed_by_a_signal_ends_as_popen_says(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_die="import os, signal\n\ndef test_die():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider").ret == -signal.SIGKILL


ZYGOTE_PROBE = """
import os, signal, subprocess, sys
from pathlib import Path

import pytest

from perfguard.pytest_plugin import confirm
from perfguard.pytest_plugin.ab import side

WORKER = (
    "import os, sys, time; from perfguard.processes import follow_parent; "
    "follow_parent({parent}); print(sys.argv[1:], os.getcwd(), os.environ['GIVEN'], "
    "os.getppid(), flush=True); sys.exit(int(sys.argv[1]))"
)

def _parent_of(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])

def test_workers_and_sessions_fork_from_the_sessions_zygote(tmp_path):
    log = tmp_path / "worker.log"
    env = {**os.environ, "GIVEN": "yes"}
    code = WORKER.format(parent=os.getpid())
    with log.open("ab") as out:
        proc = side.subprocess.Popen(
            [sys.executable, "-c", code, "3"], cwd=tmp_path, env=env, stdout=out,
            stderr=subprocess.STDOUT,
        )
    assert proc.wait(timeout=60) == 3 and proc.poll() == 3
    argv, cwd, given, ppid = log.read_text().split()[-4:]
    assert (argv, cwd, given) == ("['3']", str(tmp_path), "yes")
    assert int(ppid) != os.getpid() and _parent_of(int(ppid)) == os.getpid()  # the zygote's

    with log.open("ab") as out:  # a worker that runs until told to end
        busy = side.subprocess.Popen(
            [sys.executable, "-c", code.replace("sys.exit", "time.sleep(60) or sys.exit"), "0"],
            cwd=tmp_path, env={**env, "PYTHONPATH": ""}, stdout=out, stderr=subprocess.STDOUT,
        )
    assert busy.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        busy.wait(timeout=0.2)
    busy.terminate()
    assert busy.wait(timeout=60) == -signal.SIGTERM

    (tmp_path / "test_inner.py").write_text("def test_inner():\\n    assert False\\n")
    with log.open("ab") as out:
        done = confirm.subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inner.py"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=120,
        )
    assert done.returncode == 1 and "1 failed" in log.read_text()
    # anything else still starts a new process of this one's
    other = side.subprocess.run(["true"], check=True)
    assert other.returncode == 0
"""


@pytest.mark.slow
def test_a_forked_sessions_workers_and_re_measures_are_forked_from_its_zygote(
    pytester: pytest.Pytester,
) -> None:
    """A forked session forks its A/B workers and re-measure sessions from a zygote of its
    own: each sees its folder, environment and arguments, ends with its own exit status or
    signal, and is a grandchild of the session (what it would cost is a new interpreter)."""
    if forkserver.fresh_interpreters():
        pytest.skip("FRESH_INTERPRETERS=1: no session is forked")
    pytester.makepyfile(test_zygote=ZYGOTE_PROBE)
    done = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    assert done.ret == 0, done.stdout.str() + done.stderr.str()


def test_a_session_that_configures_torch_otherwise_starts_a_new_interpreter() -> None:
    """torch reads its compiler's configuration from the environment as it imports: a session
    (or a session's worker) whose `TORCH*` variables differ from the server's is not forked
    from a process that has read them already."""
    import sys

    mine = dict(os.environ)
    other = {**mine, "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}
    assert forkserver.shares_compiler_config(mine, os.environ)
    assert not forkserver.shares_compiler_config(other, os.environ)
    cached = {**mine, "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"}  # read where it is used
    assert forkserver.shares_compiler_config(cached, os.environ)
    assert forkserver.shared(other) is None
    launcher = forkserver._Launcher(None)  # type: ignore[arg-type]  # asks nothing of it here
    argv = [sys.executable, "-m", "pytest", "-q"]
    assert launcher._request(argv, {"env": mine}) is not None
    assert launcher._request(argv, {"env": other}) is None
