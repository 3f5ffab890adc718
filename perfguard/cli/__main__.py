"""`python -m perfguard.cli`: the `perfguard` command."""

import sys

from perfguard.cli import main

sys.exit(main())
