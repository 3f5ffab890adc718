"""What the end-to-end tests that measure for real share."""

ONE_THREAD = "--perfguard-threads=1"
"""Measure with one thread. With other work on every core, torch's OpenMP team waits at each
barrier for a thread the OS has put aside (a 512-wide MLP read 16 ms, and 0.7 ms alone), and
no margin of a timing test can hold that."""


SCRIPTED_CLOCK = '''
"""A scripted clock for perfguard's end-to-end verdict tests: every timed call reads the
milliseconds `latency_ms.txt` holds (1.0 without it), times a process-wide factor, with 1%
of seeded noise. The file is committed, so each commit has its own latency, and every
session of the repository (a confirmation's fresh process, an A/B worker in the base's
worktree) loads this conftest and times by it: the verdicts do not depend on the load of
the machine the tests run on."""

import pathlib
import random

import perfguard.measure.clock as clock

HERE = pathlib.Path(__file__).parent
SLOW_ONCE = HERE / "slow-once"  # the first process to see it is 4 times slower, none after
FACTOR = 4.0 if SLOW_ONCE.exists() else 1.0
SLOW_ONCE.unlink(missing_ok=True)
SCRIPT = HERE / "latency_ms.txt"  # a process runs one commit's code: read once
MS = (float(SCRIPT.read_text()) if SCRIPT.exists() else 1.0) * FACTOR
_noise = random.Random(sum(map(ord, str(HERE))))


def _scripted(self, fn):
    fn()
    return MS * (1.0 + _noise.gauss(0.0, 0.01))


clock.HostClock.time_call = _scripted
'''
"""The conftest.py of a repository whose sessions time by script (`SCRIPTED_CLOCK`)."""
