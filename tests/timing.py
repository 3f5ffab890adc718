"""What the end-to-end tests that measure for real share."""

ONE_THREAD = "--perfguard-threads=1"
"""Measure with one thread. With other work on every core, torch's OpenMP team waits at each
barrier for a thread the OS has put aside (a 512-wide MLP read 16 ms, and 0.7 ms alone), and
no margin of a timing test can hold that."""
