"""`perfguard init`: the workflow, an example perf test and the settings, written; `--check`:
does the repository's workflow match this perfguard's release."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.cli.common import EXIT_OK
from perfguard.errors import InputError

if TYPE_CHECKING:
    from perfguard.cli.common import Commands


def cmd_init(args: argparse.Namespace) -> int:
    import sys

    from perfguard.git import git_state
    from perfguard.init import InitOptions, check, init, next_steps

    state = git_state(Path.cwd())
    if state is None:
        raise InputError("perfguard init writes into a git repository: run it inside one")
    if args.check:
        line = check(state.root)
        if line is not None:
            print(f"perfguard init --check: {line}", file=sys.stderr)
            return EXIT_MISMATCH
        return EXIT_OK
    options = InitOptions(
        tests=args.tests,
        labels=tuple(x.strip() for x in args.runner_labels.split(",") if x.strip()),
        shards=args.shards,
        ab=args.pr == "ab",
        main_branch=args.main_branch,
        force=args.force,
        store=args.store,
        vendored=args.vendored,
        repository=args.workflow_repo,
    )
    done = init(state.root, options)
    for path in done.created:
        print(f"created {path}")
    for path in done.replaced:
        print(f"replaced {path}")
    for line in done.updated:
        print(f"updated {line}")
    for line in done.kept:
        print(f"kept {line}")
    print("\nNext:")
    for step in next_steps(options):
        print(f"  {step}")
    return EXIT_OK


REPOSITORY = "perfguard/perfguard"  # perfguard.init.forms.REPOSITORY, without importing jinja2
EXIT_MISMATCH = 1  # --check: the workflow is not this release's


def register(sub: Commands) -> None:
    p = sub.add_parser("init", help="write the workflow, an example perf test and the settings")
    p.add_argument("--tests", default="tests/perf", help="the perf tests' folder (tests/perf)")
    p.add_argument(
        "--runner-labels",
        default="self-hosted,linux,x64,gpu",
        help="labels of the GPU runners, comma-separated (self-hosted,linux,x64,gpu)",
    )
    p.add_argument("--shards", type=int, default=2, help="GPU runners that share the suite (2)")
    p.add_argument(
        "--pr",
        choices=("ab", "stored"),
        default="ab",
        help="pull requests: measure every item beside the base commit (ab, default), or "
        "compare with the stored baseline, confirming flags beside the base commit (stored: "
        "half the GPU time, but a busy runner can fool it)",
    )
    p.add_argument("--main-branch", default="main", help="the main branch (main)")
    p.add_argument(
        "--store",
        metavar="URL",
        help="keep the baselines in an object store (s3://bucket/prefix) instead of the "
        "perfguard-baselines branch of the repository",
    )
    p.add_argument("--force", action="store_true", help="replace files that exist")
    p.add_argument(
        "--vendored",
        action="store_true",
        help="write the whole workflow into the repository, not a short caller of perfguard's "
        "reusable workflow (for repositories that cannot call another repository's workflows)",
    )
    p.add_argument(
        "--workflow-repo",
        metavar="OWNER/NAME",
        default=REPOSITORY,
        help=f"where the caller finds perfguard's reusable workflow ({REPOSITORY}; a mirror's "
        "name where GitHub.com cannot be reached)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing: exit 1 with one line when the repository's workflow is not "
        "pinned to this perfguard's release",
    )
    p.set_defaults(func=cmd_init)
