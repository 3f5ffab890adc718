"""Where main's history is read from (a folder, a bucket or the baselines branch; the whole
of it or a push's window), and the options that say so: shared by `perfguard history`, `site`
and `alert`. Only the standard library at import, as `perfguard.history.commands`."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.errors import InputError
from perfguard.history.changepoints import Detection
from perfguard.store.location import location

if TYPE_CHECKING:
    from perfguard.history.analysis import History


def repo_root(start: Path | str) -> Path | None:
    """The repository of `start` (the baseline folder), else of the working directory."""
    from perfguard.git import git_state

    places = [Path.cwd()] if isinstance(start, str) else [start, Path.cwd()]
    for place in places:
        state = git_state(place) if place.exists() else None
        if state is not None:
            return state.root
    return None


def load_history(args: argparse.Namespace, metrics: Sequence[str] | None = None) -> History:
    """The history the options ask for: folder or branch, in main's order, analyzed; its
    series of `metrics` alone when given (what the search looks at is enough for the change
    points: 4 of 10 million rows of the benchmark's year of main), else of every series metric."""
    from perfguard.history.analysis import analyze
    from perfguard.history.columns import build_series
    from perfguard.history.series import (
        MAX_COMMITS,
        SERIES_METRICS,
        load_branch,
        load_folder,
        main_line,
        order_runs,
        window_of,
    )

    root = repo_root(args.dir)
    if args.window is not None and args.window < 1:
        raise InputError(f"--window must be 1 or more commits, got {args.window}")
    line = main_line(root, args.main_branch, args.window or MAX_COMMITS)  # a push: its window
    window = None
    if args.window is not None:
        if root is None or not line:
            raise InputError(
                f"--window reads the newest commits of {args.main_branch}: run inside the "
                "repository, with main's history fetched (fetch-depth: 0)"
            )
        line = line[-args.window :]
        window = window_of(root, line)
    if args.branch:
        if root is None:
            raise InputError("--branch reads the baselines from git: run inside the repository")
        found = load_branch(root, args.branch, metrics or SERIES_METRICS, window)
    else:
        found = load_folder(args.dir, metrics or SERIES_METRICS, window)
    for skipped in found.skipped:
        print(f"note: left out {skipped}", file=sys.stderr)
    if args.machine:
        found = found.of_machine(args.machine)
    baselines = found.measured()
    if not baselines:
        where = args.branch or args.dir
        raise InputError(
            f"no baselines in {where}" + (f" for {args.machine}" if args.machine else "")
        )
    ordered = order_runs(found, line, args.main_branch)
    if not ordered.runs:
        raise InputError(
            f"none of the {len(baselines)} baseline(s) is of a commit on {args.main_branch}'s "
            "first-parent history (--main-branch names the branch; fetch it with full depth)"
        )
    if not (0 <= args.min_change < float("inf")):
        raise InputError(f"--min-change must be a percentage of 0 or more, got {args.min_change}")
    if not (0 < args.max_p <= 1):
        raise InputError(f"--max-p must be above 0 and at most 1, got {args.max_p}")
    settings = Detection(min_change_pct=args.min_change, max_p=args.max_p)
    return analyze(ordered, build_series(ordered, metrics or SERIES_METRICS), settings)


def commit_url(explicit: str | None, root: Path | None) -> str | None:
    """A link pattern for a commit (`{sha}`): given, from Actions' env, or from `origin`."""
    if explicit:
        if "{sha}" not in explicit:
            raise InputError(f"--commit-url must hold {{sha}}, got {explicit!r}")
        return explicit
    server, repo = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    if server and repo:
        return f"{server.rstrip('/')}/{repo}/commit/{{sha}}"
    if root is None:
        return None
    from perfguard.git import GitError
    from perfguard.git_run import run_git

    try:
        done = run_git(root, "remote", "get-url", "origin")
    except GitError:
        return None
    found = re.fullmatch(
        r"(?:https://|git@)(github\.com)[/:]([\w.-]+/[\w.-]+?)(?:\.git)?/?", done.stdout.strip()
    )
    return f"https://{found.group(1)}/{found.group(2)}/commit/{{sha}}" if found else None


def add_source_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dir",
        type=location,
        default=Path("baselines"),
        help="baseline directory, or an object store's URL (s3://bucket/prefix)",
    )
    p.add_argument(
        "--branch",
        metavar="REF",
        help="read the baselines from this git revision instead of --dir "
        "(e.g. origin/perfguard-baselines after a fetch)",
    )
    p.add_argument("--main-branch", default="main", help="the branch whose history it is (main)")
    p.add_argument("--machine", help="only this machine key")
    p.add_argument(
        "--window",
        type=int,
        metavar="N",
        help="read only the newest N commits of main (what a push needs to find its own "
        "steps: at least twice the search's 30 points a side); default: the whole history",
    )
    p.add_argument(
        "--min-change",
        type=float,
        default=Detection.min_change_pct,
        help=f"smallest step reported, in percent ({Detection.min_change_pct:g})",
    )
    p.add_argument(
        "--max-p",
        type=float,
        default=Detection.max_p,
        help=f"largest p-value of a step's rank test ({Detection.max_p:g})",
    )
    p.add_argument(
        "--commit-url",
        help="link pattern of a commit, with {sha} (default: from GITHUB_REPOSITORY or origin)",
    )
