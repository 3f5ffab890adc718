"""Create or update the one perfguard comment on a pull request, through GitHub's REST API.

Only the standard library: the command runs in CI steps that need no torch. The comment is
found by a hidden marker in its body, across every page of the PR's comments, so running
the step again (a re-run, a new push) updates it instead of adding another.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfguard.comment import COMMENT_LIMIT, MARKER
from perfguard.github import Client, author_of, pages, posting_identity


def with_marker(body: str, marker: str = MARKER) -> str:
    """The body carrying the marker, within GitHub's limit (cut at a line, with a note)."""
    if marker not in body:
        body = f"{marker}\n{body}"
    if len(body) <= COMMENT_LIMIT:
        return body
    note = (
        "\n\n> [!NOTE]\n> This comment was cut to GitHub's 65,536-character limit; "
        "the full report is in the workflow's artifacts.\n"
    )
    cut = body[: COMMENT_LIMIT - len(note)]
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    return cut + note


@dataclass(frozen=True)
class Posted:
    action: str  # "created" or "updated"
    url: str
    author: str  # the identity it was posted as
    duplicates: int  # other comments of ours carrying the marker, left as they are
    foreign: int = 0  # comments carrying the marker that someone else wrote, never touched


def _ours(
    client: Client, repo: str, pr: int, marker: str, me: str
) -> tuple[list[Mapping[str, Any]], int]:
    """The PR's comments carrying `marker` that `me` wrote, oldest first (by id: no reliance
    on the listing's order), and how many others carry it."""
    found = [
        c
        for c in pages(client, f"/repos/{repo}/issues/{pr}/comments?per_page=100")
        if marker in str(c.get("body") or "")
    ]
    ours = sorted((c for c in found if author_of(c) == me), key=lambda c: int(c.get("id") or 0))
    return ours, len(found) - len(ours)


def upsert_comment(
    client: Client,
    repo: str,
    pr: int,
    body: str,
    marker: str = MARKER,
    *,
    author: str | None = None,
) -> Posted:
    """Update the PR's comment that carries `marker` and was written by `author` (the token's
    own identity when None), or create it when there is none. A comment someone else wrote
    is never edited, whatever it carries: a marker is easy to quote or to forge. The oldest
    of ours is the one updated, so the comment keeps its place in the conversation."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise ValueError(f"--repo must be OWNER/NAME, got {repo!r}")
    body = with_marker(body, marker)
    me = author or posting_identity(client)
    ours, foreign = _ours(client, repo, pr, marker, me)
    if ours:
        updated, _ = client.request(
            "PATCH", f"/repos/{repo}/issues/comments/{ours[0]['id']}", {"body": body}
        )
        url_ = str((updated or {}).get("html_url", ""))
        return Posted("updated", url_, me, len(ours) - 1, foreign)

    def created_meanwhile() -> Mapping[str, Any] | None:
        mine, _ = _ours(client, repo, pr, marker, me)
        return mine[0] if mine else None

    created, _ = client.request(
        "POST",
        f"/repos/{repo}/issues/{pr}/comments",
        {"body": body},
        recover=created_meanwhile,
    )
    return Posted("created", str((created or {}).get("html_url", "")), me, 0, foreign)
