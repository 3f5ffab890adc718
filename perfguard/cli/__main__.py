"""`python -m perfguard.cli`: the `perfguard` command."""

import sys

from perfguard.cli import main

if __name__ == "__main__":  # not when a worker process imports the main module again
    sys.exit(main())
