"""What comparing and reporting a large suite costs on the runner, after measuring.

Run:  .venv/bin/python benchmarks/compare_speed.py [--tests 600] [--variants 8] [--runs 3]

A synthetic suite of `--tests` x `--variants` results (5 repeats of 8 calls each, the first
quarter of the tests 20% to 170% slower on their first variant) against its base: the report
tests' suite (`tests.test_report.big_suite`). Times, best of `--runs` after a first call:
`compare_runs` (Welch per metric, Cohen's d, bootstrap intervals, BH) and `render_markdown` of
the trimmed comment. Prints one line each, with the machine's CPU count.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfguard.report.markdown import render_markdown
from perfguard.stats.verdicts import compare_runs
from tests.test_report import big_suite

T = TypeVar("T")


def best_of(runs: int, fn: Callable[[], T]) -> tuple[float, T]:
    best, out = float("inf"), fn()
    for _ in range(runs - 1):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=600)
    parser.add_argument("--variants", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base, head = big_suite(args.tests, args.variants, regressed=args.tests // 4)
    n = len(head.results)
    seconds, comparisons = best_of(args.runs, lambda: compare_runs(base, head))
    print(f"compare_runs: {n} results, {len(comparisons)} comparisons: {seconds:.2f} s")
    compared = replace(head, comparisons=tuple(comparisons))
    seconds, text = best_of(args.runs, lambda: render_markdown(compared))
    print(f"render_markdown: {len(text):,} characters: {seconds:.2f} s")
    print(f"(best of {args.runs} after a first call; {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
