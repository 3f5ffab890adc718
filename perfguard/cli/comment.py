"""`perfguard comment`: the one perfguard comment of a pull request, created or updated.

Standard library only (the job that holds the write token installs perfguard bare)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.cli.common import EXIT_OK
from perfguard.errors import InputError
from perfguard.github import add_wait_option

if TYPE_CHECKING:
    from perfguard.cli.common import Commands


def cmd_comment(args: argparse.Namespace) -> int:
    from perfguard.github import GitHubError, client_from_env
    from perfguard.pull_comment import upsert_comment

    client = client_from_env(args, "the comment step")
    if args.pr < 1:
        raise InputError(f"--pr must be a pull-request number, got {args.pr}")
    body = args.body_file.read_text(encoding="utf-8")
    try:
        posted = upsert_comment(client, args.repo, args.pr, body, author=args.author)
    except (GitHubError, ValueError) as exc:
        raise InputError(f"comment not posted: {exc}") from None
    print(
        f"{posted.action} the perfguard comment on {args.repo}#{args.pr} as {posted.author} "
        f"{posted.url}".rstrip()
    )
    if posted.duplicates:
        print(
            f"note: {posted.duplicates} older comment(s) also carry the marker; "
            "they were left as they are",
            file=sys.stderr,
        )
    if posted.foreign:
        print(
            f"note: {posted.foreign} comment(s) carrying the marker were written by someone "
            "else; they were not touched (--author names the identity to update as)",
            file=sys.stderr,
        )
    return EXIT_OK


def register(sub: Commands) -> None:
    p = sub.add_parser("comment", help="create or update the one perfguard comment on a PR")
    p.add_argument("--repo", required=True, help="OWNER/NAME")
    p.add_argument("--pr", type=int, required=True, help="pull-request number")
    p.add_argument("--body-file", type=Path, required=True, help="the report to post")
    p.add_argument(
        "--author",
        help="the login the token posts as, whose comment is updated (default: asked of the "
        "API; github-actions[bot] for Actions' GITHUB_TOKEN)",
    )
    add_wait_option(p)
    p.set_defaults(func=cmd_comment)
