"""The GitHub client against a stand-in that answers as GitHub documents: lowercase headers,
rate limits with GitHub's own headers and bodies, redirects, lost answers, newest-first issue
listings. Each test holds one point where the client once disagreed with the documentation."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

import pytest

from perfguard.github import ACTIONS_BOT, Client, GitHubError, posting_identity
from perfguard.history.alert import LABEL, TITLE_LIMIT, raise_alerts
from perfguard.history.analysis import ChangePoint, History
from perfguard.history.changepoints import Detection
from perfguard.history.series import Ordered
from perfguard.pull_comment import upsert_comment
from tests.github_fake import Answer, FakeGitHub, primary_limit, secondary_limit

T0 = 1_800_000_000.0  # the scripted clock's start (epoch seconds)


@dataclass
class Clock:
    """Time that passes only when the client sleeps."""

    now: float = T0
    sleeps: list[float] = field(default_factory=list)

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def client(fake: FakeGitHub, clock: Clock, wait_budget_s: float = 300.0) -> Client:
    return Client(
        fake.token, api=fake.url, sleep=clock.sleep, clock=clock.time, wait_budget_s=wait_budget_s
    )


# --- rate limits --------------------------------------------------------------------------


def test_a_secondary_limit_with_a_lowercase_retry_after_is_waited_out() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.failures = [secondary_limit(retry_after=2)]
        posted = upsert_comment(client(fake, clock), fake.repo, fake.pr, "report")
    assert posted.action == "created" and len(fake.comments) == 1
    assert clock.sleeps == [2.0]  # as long as GitHub asked, not a permission error


def test_a_primary_limit_is_retried_after_its_reset_not_before() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.failures = [primary_limit(reset_at=T0 + 4, status=429)]
        upsert_comment(client(fake, clock), fake.repo, fake.pr, "report")
    assert len(fake.comments) == 1
    assert clock.sleeps == [5.0]  # the reset, 4 s away, and a second past it


def test_a_primary_limit_far_away_is_waited_within_the_budget_not_cut_to_a_minute() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.failures = [primary_limit(reset_at=T0 + 1800)]
        upsert_comment(client(fake, clock, wait_budget_s=3600), fake.repo, fake.pr, "report")
    assert clock.sleeps == [1801.0] and len(fake.comments) == 1


def test_a_limit_past_the_budget_is_one_line_naming_the_limit_and_its_reset() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.failures = [primary_limit(reset_at=T0 + 1800)]
        with pytest.raises(GitHubError) as raised:
            upsert_comment(client(fake, clock), fake.repo, fake.pr, "report")
    line = str(raised.value)
    assert "\n" not in line and clock.sleeps == []
    assert "primary rate limit" in line and "resets at 08:30:00 UTC, in 1801 s" in line
    assert "300 s wait budget" in line and "permission" not in line


def test_a_secondary_limit_without_retry_after_waits_a_minute_then_longer() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.failures = [secondary_limit(), secondary_limit()]  # requests remain: not primary
        upsert_comment(client(fake, clock, wait_budget_s=600), fake.repo, fake.pr, "report")
    assert clock.sleeps == [60.0, 120.0] and len(fake.comments) == 1


def test_a_plain_403_is_a_permission_error_not_a_rate_limit() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.forbidden = True
        with pytest.raises(GitHubError, match="pull-requests: read") as raised:
            upsert_comment(client(fake, clock), fake.repo, fake.pr, "r", author="me")
    assert clock.sleeps == [] and raised.value.status == 403


# --- who posts ----------------------------------------------------------------------------


def test_only_the_integrations_own_refusal_means_an_actions_token() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        assert posting_identity(client(fake, clock)) == ACTIONS_BOT  # the usual app token
        fake.app_token = False
        fake.user_answer = primary_limit(reset_at=T0 + 3000)  # a user token, rate-limited
        with pytest.raises(GitHubError, match="primary rate limit"):
            upsert_comment(client(fake, clock), fake.repo, fake.pr, "report")
        fake.user_answer = Answer(403, {}, "Must have admin rights to Repository.")
        with pytest.raises(GitHubError, match="HTTP 403"):
            upsert_comment(client(fake, clock), fake.repo, fake.pr, "report")
    assert fake.comments == []  # never posted as the Actions bot beside the token's own


# --- redirects ----------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "code"), [("PATCH", 301), ("POST", 307), ("POST", 302)])
def test_a_redirect_within_the_api_resends_the_same_method_and_body(method: str, code: int) -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        if method == "PATCH":
            fake.add("<!-- perfguard-report -->\nold", author=ACTIONS_BOT)
        fake.redirect_root, fake.redirects, fake.redirect_code = fake.url, 1, code
        fake.redirect_method = method
        posted = upsert_comment(client(fake, clock), fake.repo, fake.pr, "new report")
        sent = [(m, b) for (m, _), b in zip(fake.requests, fake.bodies, strict=True) if m == method]
    assert len(fake.comments) == 1 and fake.comments[0]["body"].endswith("new report")
    assert posted.action == ("updated" if method == "PATCH" else "created")
    assert len(sent) == 2 and sent[0][1] == sent[1][1]  # the same body, sent again
    assert json.loads(sent[1][1])["body"].endswith("new report")


def test_a_redirect_to_another_host_is_refused_for_a_write_too() -> None:
    clock = Clock()
    with FakeGitHub() as fake, FakeGitHub() as elsewhere:
        fake.redirect_root, fake.redirects, fake.redirect_code = elsewhere.url, 1, 307
        fake.redirect_method = "POST"
        with pytest.raises(GitHubError, match="another host"):
            upsert_comment(client(fake, clock), fake.repo, fake.pr, "report")
    assert elsewhere.requests == [] and fake.comments == []


# --- writes -------------------------------------------------------------------------------


def test_a_lost_answer_to_a_post_is_looked_for_not_posted_twice() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.failures = [Answer(502, {}, "Server Error", then_apply=True, method="POST")]
        posted = upsert_comment(client(fake, clock), fake.repo, fake.pr, "report")
    assert len(fake.comments) == 1 and posted.action == "created"
    assert [m for m, _ in fake.requests].count("POST") == 1


def test_a_post_whose_answer_was_lost_before_it_landed_is_sent_again() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.failures = [Answer(502, {}, "Server Error", method="POST")]
        upsert_comment(client(fake, clock), fake.repo, fake.pr, "report")
    assert len(fake.comments) == 1
    assert [m for m, _ in fake.requests].count("POST") == 2


def test_writes_are_a_second_apart() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        github = client(fake, clock)
        github.request("POST", f"/repos/{fake.repo}/issues/{fake.pr}/comments", {"body": "a"})
        clock.now += 0.25
        github.request("POST", f"/repos/{fake.repo}/issues/{fake.pr}/comments", {"body": "b"})
        github.request("GET", f"/repos/{fake.repo}/issues/{fake.pr}/comments")  # reads: no gap
    assert clock.sleeps == [0.75]


def test_the_oldest_of_our_comments_is_the_one_updated() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        first = fake.add("<!-- perfguard-report -->\none", author=ACTIONS_BOT)
        fake.add("<!-- perfguard-report -->\ntwo", author=ACTIONS_BOT)
        fake.comments.reverse()  # whatever order the listing comes in
        posted = upsert_comment(client(fake, clock), fake.repo, fake.pr, "three")
    assert posted.duplicates == 1 and first["body"].endswith("three")


# --- the alert ----------------------------------------------------------------------------

PREVIOUS, AFTER = "a" * 40, "b" * 40


def step(test: str = "tests/perf/test_models.py::test_mlp") -> ChangePoint:
    return ChangePoint(
        "cpu-box", test, "eager", "latency_p50_ms", PREVIOUS, AFTER, 5, 10, 1.0, 1.2, 20.0, 1e-9
    )


def alert(fake: FakeGitHub, clock: Clock, *steps: ChangePoint) -> None:
    history = History(Ordered((), "test"), (), tuple(steps), Detection())
    raise_alerts(client(fake, clock), fake.repo, history, list(steps), line=[PREVIOUS, AFTER])


def test_the_alert_lists_only_its_labelled_issues_and_labels_what_it_opens() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        for i in range(250):
            fake.add_issue(f"bug {i}", "a human's report")
        alert(fake, clock, step())
        alert(fake, clock, step())
        listings = [p for m, p in fake.requests if m == "GET" and "/issues?" in p]
    ours = [i for i in fake.issues if i["user"]["login"] == fake.login]
    assert len(ours) == 1 and ours[0]["labels"] == [{"name": LABEL}]
    assert len(listings) == 2  # one page each run, not the 250 issues' three
    assert all(f"labels={LABEL}" in p and "direction=desc" in p for p in listings)


def test_the_newest_of_two_alerts_of_a_regression_is_the_one_updated() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        marker = f"<!-- perfguard-alert machine=cpu-box commit={AFTER} -->"
        old = fake.add_issue("old", marker, author=fake.login, labels=[LABEL])
        new = fake.add_issue("new", marker, author=fake.login, labels=[LABEL])
        old["state"] = "closed"
        alert(fake, clock, step())
    assert new["title"].startswith("perfguard:") and old["title"] == "old"


def test_an_alert_for_a_403_names_the_issues_permission() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.read_only = True
        with pytest.raises(GitHubError) as raised:
            alert(fake, clock, step())
    assert "issues: write" in str(raised.value) and "pull-requests" not in str(raised.value)


def test_a_long_test_id_gives_a_title_github_takes() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        alert(fake, clock, step("tests/perf/test_models.py::test_" + "x" * 400))
    (issue,) = fake.issues
    assert len(issue["title"]) <= TITLE_LIMIT and issue["title"].endswith(AFTER[:10])
    assert "+20.0" in issue["title"]


def test_an_alert_whose_answer_was_lost_opens_one_issue() -> None:
    clock = Clock()
    with FakeGitHub() as fake:
        fake.failures = [Answer(500, {}, "Server Error", then_apply=True, method="POST")]
        alert(fake, clock, step())
    assert len(fake.issues) == 1


def test_the_bisect_hint_quotes_test_ids_and_keeps_a_newline_inside_its_block() -> None:
    from perfguard.history.alert import bisect_hint

    hostile = "tests/t.py::test_x[a\n```\n@everyone ![x](http://e.test/i.png)]"
    shell = "tests/t.py::test_y[$(rm -rf ~); `id`]"
    lines = bisect_hint(PREVIOUS, AFTER, [hostile, shell])
    fence, command, closing = lines[0], lines[1], lines[2]
    # a fence longer than any run of ~ in the command, which therefore cannot close it
    assert fence == closing + "sh" and closing.startswith("~~~~") and closing not in command
    assert "\n" not in command and command.endswith(shlex.quote(shell))
    assert "@everyone" not in command
    left = " ".join(lines[3:])
    assert "control characters" in left and "\n" not in left and "![" not in left
    assert shlex.split(command)[-1] == shell  # the shell sees the id, not a command
