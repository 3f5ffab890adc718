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
            "dynamo False",
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
