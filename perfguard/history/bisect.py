"""`perfguard bisect GOOD BAD`: the first commit on GOOD..BAD where the perf tests got slower
(or faster: `--direction`, by default the direction GOOD..BAD shows).

Every step measures two commits side by side in one job, exactly as `--perfguard-ab` does on
a pull request: the later commit checked out in a temporary worktree runs
`pytest --perfguard --perfguard-ab=<earlier>` (the plugin puts the earlier one in a worktree
of its own and interleaves their blocks in pairs), and the paired verdicts say whether it is
slower. The search runs along GOOD..BAD's first-parent commits (the merges of main):

1. GOOD against BAD first: if BAD is not measurably changed (in the direction asked), there is
   nothing to find, and that is the outcome (exit 0), not an error;
2. halving: the middle commit against the last known good one. A step whose verdicts are
   unclear (inconclusive, or an item that failed to run) is measured again, up to `rounds`
   times, and then against the first known bad one, as Pinpoint does;
3. the culprit against its parent once more, so the answer carries its own paired evidence.

The user's branch, index and working tree are never touched: everything is measured in
worktrees under the temporary folder, removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfguard.errors import PerfguardError
from perfguard.git_run import run_git

SLOWER, FASTER, SAME, UNCLEAR = "slower", "faster", "same", "unclear"
DIRECTIONS = ("auto", SLOWER, FASTER)  # auto: the direction GOOD..BAD shows


class BisectError(PerfguardError):
    """Nothing to bisect, or a step that cannot be measured: one line for the user."""


@dataclass(frozen=True)
class ItemChange:
    test: str
    variant: str
    verdict: str
    change_pct: float | None
    p_value: float | None

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass(frozen=True)
class Step:
    """One paired measurement: `head` beside `base`."""

    base: str
    head: str
    outcome: str  # slower, same or unclear
    items: tuple[ItemChange, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "head": self.head,
            "outcome": self.outcome,
            "items": [i.to_json() for i in self.items],
        }

    def line(self) -> str:
        figures = ", ".join(
            f"{i.test.split('::')[-1]} [{i.variant}] {_signed(i.change_pct)} ({i.verdict})"
            for i in self.items
        )
        shown = figures or "no items"
        return f"{_short(self.head)} beside {_short(self.base)}: {self.outcome}: {shown}"


def _short(name: str) -> str:
    """A commit's first ten hex digits; a version (`NAME==VERSION`) whole."""
    return name[:10] if len(name) == 40 and all(c in "0123456789abcdef" for c in name) else name


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


def classify(comparisons: Sequence[dict[str, Any]]) -> tuple[str, tuple[ItemChange, ...]]:
    """The outcome of one step from the paired p50 comparisons of its results JSON."""
    items = tuple(
        ItemChange(
            str(c["test"]),
            str(c["variant"]),
            str(c["verdict"]),
            c.get("change_pct"),
            c.get("p_value"),
        )
        for c in comparisons
        if c.get("metric") == "latency_p50_ms"
    )
    verdicts = {i.verdict for i in items}
    if "regression" in verdicts:
        return SLOWER, items
    if not items or verdicts - {"unchanged", "improvement"}:
        return UNCLEAR, items
    return (FASTER if "improvement" in verdicts else SAME), items


Measure = Callable[[str, str], Step]


@dataclass
class Bisection:
    good: str
    bad: str
    commits: list[str]  # good, then every first-parent commit up to bad
    steps: list[Step] = field(default_factory=list)
    culprit: str | None = None
    reason: str = ""
    direction: str = SLOWER  # the change looked for: slower or faster

    def to_json(self) -> dict[str, Any]:
        return {
            "good": self.good,
            "bad": self.bad,
            "culprit": self.culprit,
            "reason": self.reason,
            "direction": self.direction,
            "commits": self.commits,
            "measurements": len(self.steps),
            "steps": [s.to_json() for s in self.steps],
        }


def _decide(
    measure: Measure,
    base: str,
    head: str,
    rounds: int,
    bisection: Bisection,
    log: Callable[[str], None],
) -> str:
    """Slower or same, measured up to `rounds` times while unclear; unclear when it stays so."""
    for _ in range(rounds):
        step = measure(base, head)
        bisection.steps.append(step)
        log(step.line())
        if step.outcome != UNCLEAR:
            return step.outcome
    return UNCLEAR


def search(
    commits: Sequence[str],
    measure: Measure,
    *,
    rounds: int = 2,
    log: Callable[[str], None] = print,
    direction: str = "auto",
) -> Bisection:
    """Bisect `commits` (good first, bad last) with `measure(base, head)` for the first
    commit that made them slower, or faster (`direction`; auto: as GOOD..BAD shows). No
    change between GOOD and BAD is an outcome (no culprit, and the reason), not an error."""
    if direction not in DIRECTIONS:
        raise BisectError(f"--direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    b = Bisection(commits[0], commits[-1], list(commits))
    whole = _decide(measure, commits[0], commits[-1], rounds, b, log)
    target = whole if direction == "auto" and whole in (SLOWER, FASTER) else direction
    b.direction = target if target in (SLOWER, FASTER) else SLOWER
    if whole != b.direction:
        shown = {SAME: "no measurable change", UNCLEAR: "no clear change"}.get(whole, whole)
        looked = "a change" if direction == "auto" else f"{b.direction}"
        b.reason = f"nothing to bisect: BAD beside GOOD shows {shown}, not {looked}"
        return b
    opposite = {SAME: SAME, SLOWER: FASTER, FASTER: SLOWER}
    lo, hi = 0, len(commits) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        outcome = _decide(measure, commits[lo], commits[mid], rounds, b, log)
        if outcome == UNCLEAR:  # the other side may tell: is bad still changed beside mid?
            against_bad = _decide(measure, commits[mid], commits[hi], rounds, b, log)
            if against_bad == b.direction:
                outcome = SAME
            elif against_bad in (SAME, opposite[b.direction]):
                outcome = b.direction
        if outcome == UNCLEAR:
            b.reason = (
                f"{_short(commits[mid])} could not be told apart from either side; the culprit "
                f"is in {_short(commits[lo])}..{_short(commits[hi])}"
            )
            return b
        lo, hi = (lo, mid) if outcome == b.direction else (mid, hi)
    if not any(s.base == commits[lo] and s.head == commits[hi] for s in b.steps):
        _decide(measure, commits[lo], commits[hi], rounds, b, log)  # the culprit's own evidence
    b.culprit = commits[hi]
    what = "commit" if _short(commits[hi]) != commits[hi] else "version"
    before = "its parent" if what == "commit" else "the one before"
    b.reason = (
        f"{_short(commits[hi])} is the first {what} {b.direction} than {before} "
        f"{_short(commits[lo])}"
    )
    return b


# --- measuring two commits with the plugin -------------------------------------------------


def _git(root: Path, *args: str) -> str:
    done = run_git(root, *args)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise BisectError(f"git {' '.join(args[:2])}: {said[-1] if said else done.returncode}")
    return done.stdout.strip()


def commits_between(root: Path, good: str, bad: str) -> list[str]:
    """GOOD, then GOOD..BAD along BAD's first parents, oldest first."""
    good_sha = _git(root, "rev-parse", "--verify", f"{good}^{{commit}}")
    bad_sha = _git(root, "rev-parse", "--verify", f"{bad}^{{commit}}")
    if run_git(root, "merge-base", "--is-ancestor", good_sha, bad_sha).returncode:
        raise BisectError(f"{good} is not an ancestor of {bad}: GOOD must come before BAD")
    line = _git(root, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}").split()
    if not line:
        raise BisectError(f"{good} and {bad} are the same commit: nothing to bisect")
    return [good_sha, *line]


@dataclass
class PluginMeasure:
    """`measure(base, head)` by the plugin's same-job A/B, in a worktree of `head`."""

    root: Path  # where the user ran the command (the pytest rootdir lies below it)
    pytest_args: Sequence[str]
    log: Callable[[str], None] = print

    def command(self, base: str, folder: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pytest",
            *self.pytest_args,
            "--perfguard",
            f"--perfguard-ab={base}",
            "--perfguard-full",  # the tests the user chose, whatever the commits touched
            f"--perfguard-json={folder / 'ab.json'}",
            f"--perfguard-report={folder / 'ab.md'}",
            "--perfguard-fail-on=never",
            "-p",
            "no:cacheprovider",
            "-q",
        ]

    def __call__(self, base: str, head: str) -> Step:
        from perfguard.worktree import Worktree

        tree = Worktree(self.root, head)
        try:
            with tempfile.TemporaryDirectory(prefix="perfguard-bisect-") as name:
                folder = Path(name)
                paths = [str(tree.rootdir), os.environ.get("PYTHONPATH", "")]
                done = subprocess.run(
                    self.command(base, folder),
                    cwd=tree.rootdir,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))},
                    capture_output=True,
                    text=True,
                )
                if not (folder / "ab.json").exists():
                    tail = " / ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
                    raise BisectError(
                        f"measuring {head[:10]} beside {base[:10]} failed "
                        f"(exit {done.returncode}): {tail}"
                    )
                doc = json.loads((folder / "ab.json").read_text(encoding="utf-8"))
        finally:
            tree.remove()
        outcome, items = classify(doc.get("comparisons") or [])
        return Step(base, head, outcome, items)
