"""One GitHub issue per regression that main's history confirms, opened once and then updated.

A regression is a step of one machine's series at one commit range; every series that stepped
there goes into the same issue. The issue carries a hidden marker with the machine and the
commit after the step. A later run finds it (among the open issues its own identity wrote)
and updates it: as more commits arrive, the detected commit may move by a few positions, so
an alert of the same machine within `NEAR` commits of main is the same regression. One that
somebody closed stays closed: the regression was dealt with, or accepted.
"""

from __future__ import annotations

import re
import shlex
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfguard.github import Client, author_of, pages, posting_identity
from perfguard.history.analysis import ChangePoint, History, commit_range
from perfguard.pull_comment import with_marker
from perfguard.report.format import cell, metric_value, pct, sci

MARKER = "<!-- perfguard-alert machine={machine} commit={commit} -->"
_MARKER = re.compile(r"<!-- perfguard-alert machine=(\S+) commit=([0-9a-f]{40}) -->")


def marker(machine: str, commit: str) -> str:
    """The hidden marker of an alert. The machine key is percent-encoded: a space in it would
    not be found again (a new issue on every run), and `-->` would end the comment early."""
    return MARKER.format(machine=urllib.parse.quote(machine, safe=""), commit=commit)


NEAR = 3  # commits of main either side within which an open alert is the same regression
LABEL = "perfguard-regression"  # every alert carries it: later runs list only these issues
TITLE_LIMIT = 256  # GitHub refuses a longer issue title
REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Raised:
    action: str  # "opened", "updated" or "left closed"
    number: int
    url: str
    title: str


@dataclass(frozen=True)
class Bisected:
    """What `perfguard bisect` found for a range (its JSON)."""

    good: str
    bad: str
    culprit: str


def group(regressions: Sequence[ChangePoint]) -> dict[tuple[str, str], list[ChangePoint]]:
    """The regressions by (machine, commit after the step): one issue each."""
    groups: dict[tuple[str, str], list[ChangePoint]] = {}
    for c in regressions:
        groups.setdefault((c.machine, c.commit), []).append(c)
    return groups


def title(machine: str, steps: Sequence[ChangePoint]) -> str:
    worst = max(steps, key=lambda c: c.change_pct)
    where = f"{worst.test.split('::')[-1]} [{worst.variant}] {worst.metric}"
    more = f" and {len(steps) - 1} more" if len(steps) > 1 else ""
    rest = f" {pct(worst.change_pct).replace(chr(0xA0), ' ')}{more} on {machine} since "
    rest += worst.commit[:10]
    whole = f"perfguard: {where}{rest}"
    if len(whole) <= TITLE_LIMIT:
        return whole
    # a long test id or machine key: shorten the test first, keep the figure and the commit
    room = TITLE_LIMIT - len("perfguard: …") - len(rest)
    if room >= 20:
        return f"perfguard: {where[:room]}…{rest}"
    return whole[: TITLE_LIMIT - 1] + "…"


def bisect_hint(good: str, bad: str, tests: Sequence[str]) -> list[str]:
    """The command that finds the culprit, as lines of the issue: each test id quoted for
    the shell, in a fenced block no id can leave. An id with a control character (a newline
    would end the block, and what follows render as the bot's own words) is left out of the
    command and named escaped."""
    plain = [t for t in tests if t.isprintable()]
    command = " ".join(["perfguard", "bisect", good, bad, "--", *map(shlex.quote, plain)])
    fence = "~~~~" + "~" * max((len(m) for m in re.findall(r"~+", command)), default=0)
    lines = [f"{fence}sh", command, fence, ""]
    odd = [t for t in tests if not t.isprintable()]
    if odd:
        names = ", ".join(cell(repr(t)) for t in odd)
        lines += [f"Left out of the command, their ids hold control characters: {names}", ""]
    return lines


def body(
    machine: str,
    steps: Sequence[ChangePoint],
    *,
    commit_url: str | None,
    culprit: str | None,
    between: int | None,
) -> str:
    first = steps[0]
    lines = [
        marker(machine, first.commit),
        f"## perfguard: main got slower on `{cell(machine)}`",
        "",
        f"Commits: {commit_range(first, commit_url)} (the step happened after the first and "
        "by the second).",
        "",
    ]
    if culprit:
        link = commit_url.format(sha=culprit) if commit_url else None
        named = f"[`{culprit[:10]}`]({link})" if link else f"`{culprit}`"
        lines += [f"**Culprit: {named}**", ""]
    elif between is not None and between > 1:
        lines += [f"{between} commits are in the range. To find the one:", ""]
        lines += bisect_hint(first.previous, first.commit, sorted({c.test for c in steps}))
    lines += [
        "| test | variant | metric | before | after | change | p | found | commits since |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for c in sorted(steps, key=lambda c: -c.change_pct):
        lines.append(
            f"| {cell(c.test)} | {cell(c.variant)} | {c.metric} | "
            f"{metric_value(c.metric, c.before)} | {metric_value(c.metric, c.after)} | "
            f"{pct(c.change_pct)} | {sci(c.p_value)} | {cell(c.found)} | {c.points_after} |"
        )
    lines += [
        "",
        "Found in main's record (`perfguard history`): beside its parent, the change main's "
        "run measured between that commit and its first parent in one job; by the search, a "
        "step in the series of commits measured alone. This issue is updated while the "
        "regression stands; close it once it is dealt with.",
        "",
    ]
    return "\n".join(lines)


def _alerts(client: Client, repo: str, me: str) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(machine, commit, issue) of the alerts `me` wrote, open or closed, newest first (by
    number: no reliance on the listing's order). Only issues with the alerts' label are
    listed, not every issue and pull request of the repository."""
    found = []
    listing = f"/repos/{repo}/issues?state=all&labels={LABEL}&sort=created&direction=desc"
    for issue in pages(client, f"{listing}&per_page=100"):
        if "pull_request" in issue or author_of(issue) != me:
            continue
        found_marker = _MARKER.search(str(issue.get("body") or ""))
        if found_marker:
            machine = urllib.parse.unquote(found_marker.group(1))
            found.append((machine, found_marker.group(2), issue))
    return sorted(found, key=lambda f: -int(f[2].get("number") or 0))


def _culprit(
    steps: Sequence[ChangePoint], line: Sequence[str], bisected: Sequence[Bisected]
) -> str | None:
    """The culprit: the only commit in the range, or what a bisect of a range inside it found."""
    first = steps[0]
    at = {sha: i for i, sha in enumerate(line)}
    if first.previous not in at or first.commit not in at:
        return None
    if at[first.commit] - at[first.previous] == 1:
        return first.commit
    for b in bisected:
        if b.culprit in at and at[first.previous] < at[b.culprit] <= at[first.commit]:
            return b.culprit
    return None


def _post(
    client: Client, repo: str, number: int | None, heading: str, text: str, me: str
) -> Raised:
    """Update issue `number`, or open one when it is None (labelled, so that later runs find
    it; an answer lost on the way is looked for before the issue is opened again)."""
    payload: dict[str, Any] = {"title": heading, "body": text}
    if number is not None:
        done, _ = client.request("PATCH", f"/repos/{repo}/issues/{number}", payload)
    else:
        hidden = _MARKER.search(text)

        def opened_meanwhile() -> Mapping[str, Any] | None:
            for _, _, issue in _alerts(client, repo, me):
                if hidden and hidden.group(0) in str(issue.get("body") or ""):
                    return issue
            return None

        payload["labels"] = [LABEL]
        done, _ = client.request("POST", f"/repos/{repo}/issues", payload, recover=opened_meanwhile)
        labels = done.get("labels") if isinstance(done, dict) else None
        if isinstance(labels, list) and not any(
            (label.get("name") if isinstance(label, dict) else label) == LABEL for label in labels
        ):
            client.log(
                f"note: GitHub dropped the label {LABEL!r} from the new issue (the token may "
                "not set labels): later runs will not find it; give the job `issues: write`"
            )
    done = done if isinstance(done, dict) else {}
    return Raised(
        "updated" if number is not None else "opened",
        int(done.get("number", number or 0)),
        str(done.get("html_url", "")),
        heading,
    )


def raise_alerts(
    client: Client,
    repo: str,
    history: History,
    regressions: Sequence[ChangePoint],
    *,
    line: Sequence[str] = (),
    bisected: Sequence[Bisected] = (),
    commit_url: str | None = None,
    author: str | None = None,
) -> list[Raised]:
    """Open (or update) one issue per group of `regressions`. `line`: main's commits, oldest
    first (names a one-commit range's culprit and tells how near two alerts are)."""
    if not REPO.fullmatch(repo):
        raise ValueError(f"--repo must be OWNER/NAME, got {repo!r}")
    groups = group(regressions)
    if not groups:
        return []
    me = author or posting_identity(client)
    existing = _alerts(client, repo, me)
    order = {sha: i for i, sha in enumerate(line or dict.fromkeys(history.commits))}
    raised = []
    for (machine, commit), steps in groups.items():
        previous = steps[0].previous
        between = order[commit] - order[previous] if {commit, previous} <= order.keys() else None
        text = body(
            machine,
            steps,
            commit_url=commit_url,
            culprit=_culprit(steps, line, bisected),
            between=between if line else None,
        )
        same = [
            issue
            for m, c, issue in existing
            if m == machine
            and {c, commit} <= order.keys()
            and abs(order[c] - order[commit]) <= NEAR
        ]
        heading = title(machine, steps)
        if same and same[0].get("state") == "closed":  # someone dealt with it: leave it closed
            raised.append(Raised("left closed", int(same[0]["number"]), "", heading))
            continue
        number = int(same[0]["number"]) if same else None
        hidden = marker(machine, commit)
        raised.append(_post(client, repo, number, heading, with_marker(text, hidden), me))
    return raised
