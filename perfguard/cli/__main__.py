"""`python -m perfguard.cli`: the `perfguard` command."""

from perfguard.cli import main

main()
