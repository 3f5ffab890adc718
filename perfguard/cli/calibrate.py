"""`perfguard calibrate`: what this runner can detect, shown on it with known slowdowns.

Runs `--pairs` pytest sessions over the selected perf items (the arguments after `--`), each
told by its orders to calibrate its share of the rounds on a pair of workers of its own
(`pytest_plugin/ab/calibrating.py`), joins their records (`calibrate.record.merged`), judges
them (`calibrate.analysis`) and writes the table. Several pairs, because a pull request
measures on a fresh pair: two processes differ by an offset of their own (memory layout,
where the allocator put things), fixed for the pair's life, that one long-lived pair shows
as a constant and never as the spread a pull request meets (on the CPU VM one pair predicted
+10% caught in 25 of 25 rounds where fresh pairs caught 45 of 50; the CNN's 4 misses). Exit 1
when a canary at or above an item's bar was caught in none of its rounds (the check cannot
fire there), 2 when nothing could be calibrated.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.cli.common import EXIT_OK, EXIT_REGRESSION
from perfguard.errors import InputError
from perfguard.files import write_json_atomic
from perfguard.orders import Orders, child_environment

if TYPE_CHECKING:
    from perfguard.calibrate import Calibration
    from perfguard.cli.common import Commands

DEFAULT_ROUNDS = 20
DEFAULT_CANARY = "2,5,10"
DEFAULT_PAIRS = 8


def canary_rounds(rounds: int) -> int:
    """Comparisons per canary and item: a quarter of the identical ones, at least 3."""
    return max(3, math.ceil(rounds / 4))


def cmd_calibrate(args: argparse.Namespace) -> int:
    from perfguard.calibrate import analyze
    from perfguard.calibrate.render import markdown, terminal

    if args.rounds < 2:
        raise InputError(f"--rounds must be 2 or more (a spread needs two), got {args.rounds}")
    canary = _canary(args.canary)
    if args.pairs < 1:
        raise InputError(f"--pairs must be 1 or more, got {args.pairs}")
    if args.judge is not None:
        calibration = _judged_again(args.judge)
    else:
        restore = _terminate_as_interrupt()
        try:
            calibration = _measure(args, canary)
        finally:
            restore()
    if not calibration.items:
        raise InputError(
            "calibrate: no perf item was selected (select them after --, e.g. -- tests/perf)"
        )
    report = analyze(calibration)
    table = markdown(report)
    print(terminal(report))
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(table, encoding="utf-8")
        print(f"calibration table: {args.output}", file=sys.stderr)
    else:
        print(table)
    if args.json is not None:
        write_json_atomic(args.json, {**report.to_json(), "record": calibration.to_json()})
    if all(item.error is not None for item in report.items):
        raise InputError("calibrate: no item could be calibrated (see the table)")
    return EXIT_REGRESSION if report.missed else EXIT_OK


def _terminate_as_interrupt() -> Callable[[], None]:
    """SIGTERM (a cancelled job) unwinds as Ctrl-C does: the pytest session is ended with
    its workers, which on a GPU runner would go on holding the GPU. Returns what puts the
    handler of before back."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM received")

    previous = signal.signal(signal.SIGTERM, interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _judged_again(path: Path) -> Calibration:
    """The rounds of an earlier calibration's `--json` (whole, or cut short after a pair)."""
    from perfguard.calibrate import Calibration, CalibrationError

    try:
        found = json.loads(path.read_text(encoding="utf-8"))
        return Calibration.from_json(found.get("record") if isinstance(found, dict) else found)
    except (OSError, ValueError, CalibrationError) as exc:
        raise InputError(f"calibrate --judge: {path} does not read: {exc}") from None
    except RecursionError:
        raise InputError(f"calibrate --judge: {path} is nested too deeply to be one") from None


def _measure(args: argparse.Namespace, canary: tuple[float, ...]) -> Calibration:
    """The rounds, measured: one driving pytest session per pair of workers."""
    from perfguard.calibrate import Calibration, CalibrationError, merged

    pairs = min(args.pairs, args.rounds)
    parts = []
    with tempfile.TemporaryDirectory(prefix="perfguard-calibrate-") as tmp:
        for index, (rounds, canaries) in enumerate(
            zip(
                _shares(args.rounds, pairs), _shares(canary_rounds(args.rounds), pairs), strict=True
            )
        ):
            folder = Path(tmp) / f"pair-{index + 1}"
            folder.mkdir()
            record = folder / "calibration.json"
            asked = {
                "out": str(record),
                "rounds": rounds,
                "canary": list(canary),
                "canary_rounds": canaries,
            }
            print(f"calibrate: worker pair {index + 1} of {pairs}", file=sys.stderr)
            code = _session(folder, asked, args.pytest_args)
            try:
                parts.append(Calibration.from_json(json.loads(record.read_text(encoding="utf-8"))))
            except (OSError, ValueError, CalibrationError) as exc:
                raise InputError(
                    f"calibrate: the pytest session (exit code {code}) wrote no calibration: {exc}"
                ) from None
            if args.json is not None and index + 1 < pairs:
                # the rounds so far, judged by nobody yet: a calibration cut short (a job's
                # time limit) keeps what it measured (`perfguard calibrate --judge` reads it)
                partial = {"partial": f"{index + 1} of {pairs} pairs"}
                write_json_atomic(args.json, {**partial, "record": merged(parts).to_json()})
    return merged(parts)


def _shares(total: int, parts: int) -> list[int]:
    """`total` split into `parts` shares as even as whole numbers go, the larger first."""
    return [total // parts + (1 if index < total % parts else 0) for index in range(parts)]


def _canary(text: str) -> tuple[float, ...]:
    try:
        found = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(f"--canary takes percentages, e.g. 2,5,10, got {text!r}") from None
    if not found:
        raise InputError(f"--canary names no share: give percentages, e.g. 2,5,10, got {text!r}")
    if any(not (0 < pct <= 100) for pct in found):
        raise InputError(f"--canary: each share is above 0 and at most 100 percent, got {text!r}")
    return tuple(sorted(set(found)))


def _session(folder: Path, asked: dict[str, object], pytest_args: Sequence[str]) -> int:
    """The calibrating pytest session, its output shown as it goes."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--perfguard",
        "--perfguard-compare=none",
        "--perfguard-record=no",
        f"--perfguard-json={folder / 'results.json'}",
        f"--perfguard-report={folder / 'report.md'}",
        "-p",
        "no:cacheprovider",
        *pytest_args,
    ]
    env = child_environment(Orders(calibrate=asked))
    proc = subprocess.Popen(command, env=env, stdout=sys.stderr)
    try:
        return proc.wait()
    except BaseException:  # Ctrl-C, or SIGTERM (a cancelled job): the session ends too
        proc.terminate()  # it stops its workers (they follow it) as an interrupted one does
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def register(sub: Commands) -> None:
    p = sub.add_parser(
        "calibrate",
        usage="perfguard calibrate [--rounds N] [--canary 2,5,10] [--pairs 8] [--json OUT] "
        "[-o OUT.md] [--judge JSON] [-- PYTEST ARGS]",
        help="measure what this runner can detect: each perf item beside itself, and with "
        "known slowdowns",
        description="Measures the selected perf items as a pull request's A/B does, both "
        "sides the same tree, for N rounds, plus rounds where one side's calls are made "
        "slower by known shares (canaries), shared among a few pairs of worker processes. Per "
        "item: the false alarms and the canaries caught, as these pairs saw them and as a fresh "
        "pair (a pull request's) is predicted to, the smallest change called reliably and the "
        "bar to advise. Exit 1 when a canary at or above an item's bar was caught in none of "
        "its rounds. Arguments after -- go to pytest (the tests, -k, --perfguard-variants).",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help=f"identical comparisons per item ({DEFAULT_ROUNDS}); each canary gets a quarter "
        "as many, at least 3",
    )
    p.add_argument(
        "--canary",
        default=DEFAULT_CANARY,
        help=f"the canaries' slowdowns, in percent of a call ({DEFAULT_CANARY})",
    )
    p.add_argument(
        "--pairs",
        type=int,
        default=DEFAULT_PAIRS,
        help=f"pairs of worker processes the rounds are shared among ({DEFAULT_PAIRS}): a pull "
        "request measures on a fresh pair, whose processes differ by an offset of their own "
        "that one long-lived pair never shows",
    )
    p.add_argument(
        "--json",
        type=Path,
        help="write the figures and the rounds here (the rounds so far after each pair)",
    )
    p.add_argument(
        "--judge",
        type=Path,
        metavar="JSON",
        help="measure nothing: judge the rounds of an earlier calibration's --json (one cut "
        "short too) by this perfguard",
    )
    p.add_argument("-o", "--output", type=Path, help="write the Markdown table here")
    p.set_defaults(func=cmd_calibrate, pytest_args=[])  # what follows `--` (perfguard.cli.main)
