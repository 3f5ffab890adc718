"""What the commands share: exit codes, argument types, the report's output options."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from perfguard.comment import COMMENT_LIMIT
from perfguard.errors import InputError
from perfguard.records import Run

if TYPE_CHECKING:
    from perfguard.stats.verdicts import Thresholds

EXIT_OK, EXIT_REGRESSION, EXIT_INPUT = 0, 1, 2

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]
    """What each command's `register` adds its parser to."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are InputError (exit 2, one line)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.prog}: {message}")


def percent(text: str) -> float:
    """An argparse type: a finite percentage, 0 or more (NaN would switch a gate off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of percent, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number, 0 or more, got {text!r}")
    return value


def limit(args: argparse.Namespace) -> int | None:
    if args.max_chars < 0:
        raise InputError(f"--max-chars must be 0 (no limit) or more, got {args.max_chars}")
    return args.max_chars or None


def render(args: argparse.Namespace, run: Run, thresholds: Thresholds | None = None) -> None:
    """The report to -o (comment-sized, the full one beside it when trimmed) or stdout."""
    from perfguard.report.markdown import render_markdown
    from perfguard.report.outputs import write_reports

    if args.output is None:
        sys.stdout.write(render_markdown(run, thresholds, limit=limit(args)))
        return
    written = write_reports(
        run, args.output, thresholds, limit=limit(args), step_summary=args.step_summary
    )
    print(f"wrote {args.output}", file=sys.stderr)
    if written.full is not None:
        print(f"trimmed to fit a comment; the full report: {written.full}", file=sys.stderr)


def output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-chars",
        type=int,
        default=COMMENT_LIMIT,
        help="trim the report to this many characters (default: GitHub's comment limit, "
        f"{COMMENT_LIMIT}; 0: never trim); with -o the full report is written beside it",
    )
    p.add_argument(
        "--step-summary",
        action="store_true",
        help="with -o, also append the report to $GITHUB_STEP_SUMMARY when it is set",
    )


def incomplete_exit(run: Run) -> int | None:
    """For a run that did not measure all it was asked to, or whose accept file did not
    read (the report says that run fails): its line on stderr, and exit 1 (a required check
    never passes it); None for a complete run."""
    if run.accept_error:
        print(f"perfguard: nothing accepted: {run.accept_error}", file=sys.stderr)
        return EXIT_REGRESSION
    if run.complete:
        return None
    from perfguard.records.gaps import summary

    print(f"perfguard: incomplete run: {summary(run.incomplete)}", file=sys.stderr)
    return EXIT_REGRESSION
