"""The error every `perfguard` command reports as one line on stderr, with exit 2."""


class InputError(Exception):
    """Bad input or usage: reported as one line on stderr, exit 2."""
