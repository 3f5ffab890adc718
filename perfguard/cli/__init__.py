"""The `perfguard` command: the steps that need no GPU and no torch.

One module per command (`report`, `compare`, `comment`, `merge`, `init`, `baselines`; the
history's in `perfguard.history.commands`), each registering its parser. Exit codes: 0 fine,
1 regression found, 2 usage or input error: any `PerfguardError`, printed once here as one
line on stderr. Each command imports what it needs when it runs: `comment` needs only the
standard library, and `baselines pull`/`push` only filelock, so the workflow's jobs that hold
a write token can install perfguard without its dependencies (and without the pull request's
code).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from perfguard.cli.common import EXIT_INPUT, EXIT_OK, EXIT_REGRESSION, Parser
from perfguard.errors import InputError, PerfguardError
from perfguard.version import __version__

__all__ = ["EXIT_INPUT", "EXIT_OK", "EXIT_REGRESSION", "build_parser", "main", "parse_args"]


def build_parser() -> argparse.ArgumentParser:
    from perfguard.cli import baselines, calibrate, comment, compare, init, merge, report
    from perfguard.history import commands as history_commands

    parser = Parser(prog="perfguard", description="perfguard: the steps that need no GPU")
    parser.add_argument("--version", action="version", version=f"perfguard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in (report, compare, comment, merge, init, baselines, history_commands, calibrate):
        command.register(sub)
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The parsed command line; what follows `--` goes to pytest (`perfguard bisect`)."""
    argv = list(argv)
    if "--" not in argv:
        return build_parser().parse_args(argv)
    cut = argv.index("--")
    args = build_parser().parse_args(argv[:cut])
    if not hasattr(args, "pytest_args"):
        raise InputError(f"perfguard {args.command}: takes no arguments after --")
    args.pytest_args = argv[cut + 1 :]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        code: int = args.func(args)
        return code
    except (PerfguardError, OSError) as exc:  # one line; anything else is a bug
        print(f"perfguard: error: {exc}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
