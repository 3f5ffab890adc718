"""`perfguard baselines list|prune|pull|push`: the stored baselines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perfguard.cli.common import EXIT_OK
from perfguard.errors import InputError
from perfguard.store.baselines import BaselineStore


def cmd_baselines_list(args: argparse.Namespace) -> int:
    store = BaselineStore(args.dir)
    infos = store.list(args.machine)
    if not infos:
        print(f"no baselines under {args.dir}")
        return EXIT_OK
    print(f"{'machine':<36} {'commit':<12} {'created':<26} tests")
    for info in sorted(infos, key=lambda i: (i.machine, i.created or "")):
        print(f"{info.machine:<36} {info.commit[:12]:<12} {info.created or '?':<26} {info.tests}")
    return EXIT_OK


def cmd_baselines_prune(args: argparse.Namespace) -> int:
    removed = BaselineStore(args.dir).prune(args.keep, args.machine, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for info in removed:
        print(f"{verb} {info.path}")
    print(f"{verb} {len(removed)} baseline(s), kept the {args.keep} newest of each machine")
    return EXIT_OK


def _sync_root(directory: Path) -> Path:
    from perfguard.git import git_state

    state = git_state(directory if directory.exists() else Path.cwd())
    if state is None:
        raise InputError(f"{directory} is not inside a git repository: pull and push need one")
    return state.root


def cmd_baselines_pull(args: argparse.Namespace) -> int:
    from perfguard.store.sync import SyncError, pull

    try:
        result = pull(_sync_root(args.dir), args.dir, remote=args.remote, branch=args.branch)
    except SyncError as exc:
        raise InputError(str(exc)) from None
    print(
        f"pulled {len(result.added)} baseline(s) from {args.remote}/{args.branch} into {args.dir}"
    )
    for path in result.kept:
        print(f"kept the local {path}: it differs from the branch's copy")
    for refusal in result.refused:
        print(f"perfguard: refused the branch's {refusal}", file=sys.stderr)
    return EXIT_OK


def cmd_baselines_push(args: argparse.Namespace) -> int:
    from perfguard.store.sync import SyncError, push

    try:
        result = push(_sync_root(args.dir), args.dir, remote=args.remote, branch=args.branch)
    except SyncError as exc:
        raise InputError(str(exc)) from None
    print(
        f"pushed {len(result.added)} baseline(s) to {args.remote}/{args.branch}"
        + (f" after {result.attempts} attempts" if result.attempts > 1 else "")
    )
    return EXIT_OK


def register(sub: Any) -> None:
    from perfguard.cli import Parser

    p = sub.add_parser("baselines", help="stored baselines")
    bsub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    lst = bsub.add_parser("list", help="list stored baselines (machine, commit, date, tests)")
    lst.add_argument("--dir", type=Path, default=Path("baselines"), help="baseline directory")
    lst.add_argument("--machine", help="only this machine key")
    lst.set_defaults(func=cmd_baselines_list)
    prune = bsub.add_parser("prune", help="delete all but the newest N baselines per machine")
    prune.add_argument("--keep", type=int, required=True, help="how many to keep per machine")
    prune.add_argument("--dir", type=Path, default=Path("baselines"), help="baseline directory")
    prune.add_argument("--machine", help="only this machine key")
    prune.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")
    prune.set_defaults(func=cmd_baselines_prune)
    for name, func, what in (
        ("pull", cmd_baselines_pull, "bring baselines from"),
        ("push", cmd_baselines_push, "add local baselines to"),
    ):
        sp = bsub.add_parser(name, help=f"{what} a git branch of a remote")
        sp.add_argument("--dir", type=Path, default=Path("baselines"), help="baseline directory")
        sp.add_argument("--remote", default="origin", help="git remote (default origin)")
        sp.add_argument(
            "--branch",
            default="perfguard-baselines",
            help="branch holding the baselines (default perfguard-baselines)",
        )
        sp.set_defaults(func=func)
