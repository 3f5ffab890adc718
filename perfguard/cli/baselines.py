"""`perfguard baselines list|prune|compact|pull|push|retain`: the stored baselines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.cli.common import EXIT_OK, Parser
from perfguard.errors import InputError
from perfguard.store.gitcache import redacted
from perfguard.store.location import is_url, location
from perfguard.store.objects import open_store

if TYPE_CHECKING:
    from perfguard.cli.common import Commands


def cmd_baselines_list(args: argparse.Namespace) -> int:
    store = open_store(args.dir)
    infos = store.list(args.machine)
    if not infos:
        print(f"no baselines under {args.dir}")
        return EXIT_OK
    print(f"{'machine':<36} {'commit':<12} {'created':<26} tests")
    for info in sorted(infos, key=lambda i: (i.machine, i.created or "")):
        print(f"{info.machine:<36} {info.commit[:12]:<12} {info.created or '?':<26} {info.tests}")
    return EXIT_OK


def cmd_baselines_prune(args: argparse.Namespace) -> int:
    store = open_store(args.dir)
    removed = store.prune(args.keep, args.machine, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for info in removed:
        print(f"{verb} {info.path}")
    print(f"{verb} {len(removed)} baseline(s), kept the {args.keep} newest of each machine")
    if not args.dry_run:
        folded, months = store.fold_months(args.machine)
        if folded:
            print(
                f"folded {folded} summary part(s) of commits without a record into "
                + ", ".join(months)
            )
    return EXIT_OK


def cmd_baselines_compact(args: argparse.Namespace) -> int:
    done = open_store(args.dir).compact(args.machine)
    for c in done:
        print(f"{c.old} -> {str(c.new).rsplit('/', 1)[-1]}: {c.before:,} -> {c.after:,} bytes")
    before, after = sum(c.before for c in done), sum(c.after for c in done)
    print(
        f"compacted {len(done)} baseline(s) under {args.dir}"
        + (
            f" ({before:,} -> {after:,} bytes); push them to replace the branch's copies"
            if done
            else ""
        )
    )
    return EXIT_OK


def _sync_root(directory: Path) -> Path:
    from perfguard.git import git_state

    state = git_state(directory if directory.exists() else Path.cwd())
    if state is None:
        raise InputError(f"{directory} is not inside a git repository: pull and push need one")
    return state.root


def cmd_baselines_pull(args: argparse.Namespace) -> int:
    from perfguard.store.sync import for_run, pull

    root = _sync_root(args.dir)
    choices: list[str] = []
    only = None
    if args.for_run is not None:
        if args.history < 0:
            raise InputError(f"--history must be 0 or more, got {args.history}")
        only = for_run(
            root,
            args.for_run,
            main_branch=args.main_branch,
            depth=args.depth,
            history=args.history,
            choices=choices,
        )
    result = pull(root, args.dir, remote=args.remote, branch=args.branch, only=only)
    for line in choices:
        print(f"baseline for {line}")
    print(
        f"pulled {len(result.added)} baseline(s) from {redacted(args.remote)}/{args.branch} "
        f"into {args.dir}"
        + (f", and {result.summaries} summary part(s)" if result.summaries else "")
    )
    for path in result.kept:
        print(f"kept the local {path}: it differs from the branch's copy")
    for refusal in result.refused:
        print(f"perfguard: refused the branch's {refusal}", file=sys.stderr)
    return EXIT_OK


def cmd_baselines_push(args: argparse.Namespace) -> int:
    from perfguard.store.sync import push

    result = push(_sync_root(args.dir), args.dir, remote=args.remote, branch=args.branch)
    print(
        f"pushed {len(result.added)} baseline(s) to {redacted(args.remote)}/{args.branch}"
        + (f" after {result.attempts} attempts" if result.attempts > 1 else "")
    )
    return EXIT_OK


def cmd_baselines_retain(args: argparse.Namespace) -> int:
    from perfguard.history.series import main_line
    from perfguard.store.retention import retain

    root = _sync_root(Path.cwd())
    line = main_line(root, args.main_branch, limit=None)  # every record can be placed
    if not line:
        raise InputError(
            f"no branch {args.main_branch!r} (or origin/{args.main_branch}) in this checkout: "
            "retain orders the records along main's first-parent history (check out with "
            "fetch-depth: 0, or name the branch with --main-branch)"
        )
    done = retain(
        root,
        keep=args.keep,
        line=line,
        remote=args.remote,
        branch=args.branch,
        dry_run=args.dry_run,
    )
    verb = "would remove" if args.dry_run else "removed"
    for path in done.removed:
        print(f"{verb} {path}")
    print(
        f"{verb} {len(done.removed)} record(s) of {redacted(args.remote)}/{args.branch}, kept "
        f"{len(done.kept)} and every summary part ({done.parts})"
        + ("; the branch is now one commit" if done.pushed else "")
    )
    if done.folded:
        verb = "would fold" if args.dry_run else "folded"
        into = f" into {', '.join(done.months)}" if done.months else " into month files"
        print(f"{verb} {done.folded} summary part(s) of commits without a record{into}")
    return EXIT_OK


def register(sub: Commands) -> None:
    p = sub.add_parser("baselines", help="stored baselines")
    bsub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    _register_local(bsub)
    _register_branch(bsub)


def _folder(value: str) -> Path:
    """A local baseline folder: pull and push copy between it and a git branch."""
    where = location(value)
    if is_url(where):
        raise argparse.ArgumentTypeError(
            f"{value} is an object store: baselines there are read and written in place "
            "(--perfguard-baseline-dir, and --dir of list, prune, history and site); pull and "
            "push copy between a folder and a git branch"
        )
    return Path(where)


def _dir_and_machine(parser: Any) -> None:
    parser.add_argument(
        "--dir",
        type=location,
        default=Path("baselines"),
        help="baseline directory, or an object store's URL (s3://bucket/prefix)",
    )
    parser.add_argument("--machine", help="only this machine key")


def _register_local(bsub: Any) -> None:
    """The commands on the local baseline folder."""
    lst = bsub.add_parser("list", help="list stored baselines (machine, commit, date, tests)")
    _dir_and_machine(lst)
    lst.set_defaults(func=cmd_baselines_list)
    prune = bsub.add_parser(
        "prune", help="delete all but the newest N records per machine (the summary stays)"
    )
    prune.add_argument("--keep", type=int, required=True, help="how many to keep per machine")
    _dir_and_machine(prune)
    prune.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")
    prune.set_defaults(func=cmd_baselines_prune)
    compact = bsub.add_parser(
        "compact",
        help="rewrite older plain <sha>.json baselines (every raw sample) as compact "
        "<sha>.json.gz (per-repeat summaries and a quantile sketch)",
    )
    _dir_and_machine(compact)
    compact.set_defaults(func=cmd_baselines_compact)


def _remote_and_branch(parser: Any) -> None:
    parser.add_argument("--remote", default="origin", help="git remote (default origin)")
    parser.add_argument(
        "--branch",
        default="perfguard-baselines",
        help="branch holding the baselines (default perfguard-baselines)",
    )


def _register_branch(bsub: Any) -> None:
    """The commands on the baselines branch of a remote."""
    for name, func, what in (
        ("pull", cmd_baselines_pull, "bring baselines from"),
        ("push", cmd_baselines_push, "add local baselines to"),
    ):
        sp = bsub.add_parser(name, help=f"{what} a git branch of a remote")
        sp.add_argument("--dir", type=_folder, default=Path("baselines"), help="baseline directory")
        _remote_and_branch(sp)
        sp.set_defaults(func=func)
    pull = bsub.choices["pull"]
    pull.add_argument(
        "--for",
        dest="for_run",
        metavar="REF",
        help="take only what a run on HEAD compared with REF needs (auto: the baseline "
        "--perfguard-compare=auto would choose, per machine, and the summary parts of "
        "the baselines before it); default: every baseline on the branch",
    )
    pull.add_argument("--main-branch", default="main", help="with --for auto: main's branch")
    pull.add_argument(
        "--depth",
        type=int,
        default=50,
        help="with --for auto: first-parent commits searched (as perfguard_baseline_depth)",
    )
    pull.add_argument(
        "--history",
        type=int,
        default=20,
        help="with --for: summary parts taken for the noise floor and trend (20; 0: the "
        "record alone, which is all a run measured beside its base (--perfguard-ab) reads)",
    )
    retain = bsub.add_parser(
        "retain",
        help="keep on the branch the records of the N newest commits of each machine and the "
        "whole summary table, and rewrite its history to one commit (its size stays bounded)",
    )
    retain.add_argument("--keep", type=int, required=True, help="records kept per machine")
    retain.add_argument("--main-branch", default="main", help="main's branch (main)")
    _remote_and_branch(retain)
    retain.add_argument("--dry-run", action="store_true", help="say what would go, push nothing")
    retain.set_defaults(func=cmd_baselines_retain)
