"""The root of every error perfguard raises on purpose, and the one for bad input or usage.

Each part raises its own subclass (`GitError`, `BaselineError`, `RecordError`, ...) with a
message a user can act on; the `perfguard` command catches `PerfguardError` once and prints
it as one line on stderr, exit 2. Anything else that escapes is a bug, and keeps its
traceback."""


class PerfguardWarning(UserWarning):
    """A warning of perfguard's own; each one ends with what to do about it."""


class PerfguardError(Exception):
    """An error perfguard raised on purpose: its message is the one line a user reads."""


class InputError(PerfguardError):
    """Bad input or usage: reported as one line on stderr, exit 2."""
