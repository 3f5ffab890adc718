"""`perfguard report`: the Markdown report of a results file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.cli.common import (
    EXIT_OK,
    EXIT_REGRESSION,
    incomplete_exit,
    output_options,
    render,
)
from perfguard.store.run_file import read_run_file

if TYPE_CHECKING:
    from perfguard.cli.common import Commands


def cmd_report(args: argparse.Namespace) -> int:
    run = read_run_file(args.results)
    render(args, run)
    if not args.exit_code:
        return EXIT_OK
    return incomplete_exit(run) or (EXIT_REGRESSION if run.has_regression else EXIT_OK)


def register(sub: Commands) -> None:
    p = sub.add_parser("report", help="render the Markdown report from a results file")
    p.add_argument("results", type=Path)
    p.add_argument("-o", "--output", type=Path, help="write here instead of standard output")
    p.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 1 when the results hold a regression or the run is incomplete (it did not "
        "measure all it was asked to)",
    )
    output_options(p)
    p.set_defaults(func=cmd_report)
