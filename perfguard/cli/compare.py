"""`perfguard compare`: two results or baseline files, compared."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.cli.common import EXIT_OK, EXIT_REGRESSION, output_options, percent, render
from perfguard.errors import InputError
from perfguard.files import write_json_atomic
from perfguard.records import BaselineRef, Run
from perfguard.store.run_file import read_run_file

if TYPE_CHECKING:
    from perfguard.cli.common import Commands
    from perfguard.stats.verdicts import Thresholds


def compare_files(base: Run, head: Run, thresholds: Thresholds, base_path: Path) -> Run:
    from perfguard.stats.op_verdicts import compare_results
    from perfguard.stats.verdicts import compare_runs

    if base.machine != head.machine:
        raise InputError(
            f"{base_path} was measured on machine {base.machine!r}, the other file on "
            f"{head.machine!r}: perfguard never compares numbers from different machines"
        )
    reason = f"perfguard compare: {base_path.name}"
    return replace(
        head,
        baseline=BaselineRef(commit=base.commit, reason=reason),
        comparisons=compare_runs(base, head, thresholds),
        op_comparisons=compare_results(base.results, head.results, thresholds, paired=False),
    )


def cmd_compare(args: argparse.Namespace) -> int:
    from perfguard.stats.verdicts import Thresholds

    base, head = read_run_file(args.base), read_run_file(args.head)
    thresholds = Thresholds(gate_p99=args.gate_p99)
    if args.min_change is not None:
        thresholds = replace(thresholds, min_change_pct=args.min_change)
    run = compare_files(base, head, thresholds, args.base)
    if args.json is not None:
        write_json_atomic(args.json, run.to_json())
        print(f"wrote {args.json}", file=sys.stderr)
    if args.output is not None or args.json is None:
        render(args, run, thresholds)
    return EXIT_REGRESSION if run.has_regression else EXIT_OK


def register(sub: Commands) -> None:
    p = sub.add_parser("compare", help="compare two results or baseline files (exit 1: regression)")
    p.add_argument("base", type=Path)
    p.add_argument("head", type=Path)
    p.add_argument("--json", type=Path, help="write the compared results here")
    p.add_argument("-o", "--output", type=Path, help="write the Markdown report here")
    p.add_argument(
        "--min-change",
        type=percent,
        default=None,
        help="smallest latency change in percent that can be a regression (default 10)",
    )
    p.add_argument("--gate-p99", action="store_true", help="let p99 latency gate the verdict")
    output_options(p)
    p.set_defaults(func=cmd_compare)
