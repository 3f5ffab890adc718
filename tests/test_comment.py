"""`perfguard comment` against a local stand-in for GitHub's API (no network)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from perfguard import cli
from perfguard.comment import COMMENT_LIMIT, MARKER
from perfguard.pull_comment import with_marker
from tests.github_fake import FakeGitHub


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    sleeps: list[float] = []
    monkeypatch.setattr("perfguard.github.time.sleep", sleeps.append)
    with FakeGitHub() as fake:
        monkeypatch.setenv("GITHUB_API_URL", fake.url)
        monkeypatch.setenv("GITHUB_TOKEN", fake.token)
        fake.sleeps = sleeps  # type: ignore[attr-defined]
        yield fake


def comment(tmp_path: Path, body: str, repo: str = "octo/models", pr: int = 7) -> int:
    path = tmp_path / "report.md"
    path.write_text(body)
    return cli.main(["comment", "--repo", repo, "--pr", str(pr), "--body-file", str(path)])


def test_three_runs_leave_one_updated_comment_even_on_the_second_page(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    github.page_size = 2
    for i in range(3):
        github.add(f"a human comment {i}")
    for i in range(3):
        assert comment(tmp_path, f"{MARKER}\nreport number {i}") == 0
        github.add(f"a later human comment {i}")  # pushes ours further down the pages
    ours = [c for c in github.comments if MARKER in c["body"]]
    assert len(ours) == 1
    assert ours[0]["body"].endswith("report number 2")
    assert len(github.comments) == 7
    methods = [m for m, _ in github.requests if m != "GET"]
    assert methods == ["POST", "PATCH", "PATCH"]
    # the third run had to read past the first page to find it
    assert any("page=2" in path for m, path in github.requests if m == "GET")
    out = capsys.readouterr().out
    assert "updated the perfguard comment on octo/models#7" in out


def test_a_body_without_the_marker_gets_it(github: FakeGitHub, tmp_path: Path) -> None:
    assert comment(tmp_path, "plain text") == 0
    assert comment(tmp_path, "plain text, again") == 0
    assert [c["body"] for c in github.comments] == [f"{MARKER}\nplain text, again"]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("bad-token", "HTTP 401 Bad credentials"),
        ("forbidden", "HTTP 403"),
        ("no-such-pr", "HTTP 404 Not Found"),
    ],
)
def test_refusals_exit_2_with_one_line_and_never_the_token(
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
    expected: str,
) -> None:
    secret = github.token
    pr = 7
    if case == "bad-token":
        secret = "ghp_wrong_but_still_secret"
        monkeypatch.setenv("GITHUB_TOKEN", secret)
    elif case == "forbidden":
        github.forbidden = True
    else:
        pr = 99
    assert comment(tmp_path, "x", pr=pr) == 2
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], captured.err
    assert github.comments == []


def test_retries_on_server_errors_and_rate_limits(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    github.failures = [502, 429, 503]
    assert comment(tmp_path, "report") == 0
    assert len(github.comments) == 1
    assert len(github.sleeps) == 3  # type: ignore[attr-defined]
    assert "retrying" in capsys.readouterr().err


def test_gives_up_after_repeated_server_errors(github: FakeGitHub, tmp_path: Path) -> None:
    github.failures = [500] * 10
    assert comment(tmp_path, "report") == 2
    assert github.comments == []


def test_missing_token_is_a_usage_error(
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("GITHUB_TOKEN")
    assert comment(tmp_path, "report") == 2
    assert "GITHUB_TOKEN is not set" in capsys.readouterr().err
    assert github.requests == []


def test_bad_repo_name_is_a_usage_error(github: FakeGitHub, tmp_path: Path) -> None:
    assert comment(tmp_path, "report", repo="not a repo") == 2
    assert github.requests == []


def test_an_oversized_body_is_cut_at_a_line_with_a_note() -> None:
    body = "\n".join(f"line {i} " + "x" * 60 for i in range(2000))
    cut = with_marker(body)
    assert len(cut) <= COMMENT_LIMIT
    assert cut.startswith(MARKER)
    assert "cut to GitHub's 65,536-character limit" in cut
    assert "\nline 1 " in cut and not cut.split("\n\n> [!NOTE]")[0].endswith("x" * 61)


def test_a_marker_comment_someone_else_wrote_is_never_edited(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged = github.add(f"{MARKER}\nquoted by a human, or planted", author="mallory")
    assert comment(tmp_path, "the real report") == 0
    assert forged["body"] == f"{MARKER}\nquoted by a human, or planted"
    ours = [c for c in github.comments if c["user"]["login"] == "github-actions[bot]"]
    assert [c["body"] for c in ours] == [f"{MARKER}\nthe real report"]
    assert comment(tmp_path, "the second report") == 0
    assert [c["body"] for c in ours] == [f"{MARKER}\nthe second report"]
    assert len(github.comments) == 2
    err = capsys.readouterr().err
    assert "written by someone else" in err


def test_the_posting_identity_comes_from_the_api_or_the_author_option(
    github: FakeGitHub, tmp_path: Path
) -> None:
    github.app_token = False  # a personal token: GET /user answers
    github.login = "perf-bot"
    github.add(f"{MARKER}\nby github-actions", author="github-actions[bot]")
    assert comment(tmp_path, "from perf-bot") == 0
    assert [c["user"]["login"] for c in github.comments] == ["github-actions[bot]", "perf-bot"]
    path = tmp_path / "r.md"
    path.write_text("named")
    github.login = "github-actions[bot]"
    code = cli.main(
        ["comment", "--repo", "octo/models", "--pr", "7", "--body-file", str(path),
         "--author", "github-actions[bot]"]
    )  # fmt: skip
    assert code == 0
    assert github.comments[0]["body"] == f"{MARKER}\nnamed"


def test_the_token_never_follows_a_page_link_to_another_host(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeGitHub() as elsewhere:
        github.page_size = 1
        github.add("one")
        github.add("two")
        github.next_root = elsewhere.url.replace("127.0.0.1", "localhost")
        assert comment(tmp_path, "report") == 2
        assert elsewhere.requests == []
        assert "another host" in capsys.readouterr().err


def test_a_redirect_to_another_host_never_carries_the_token(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeGitHub() as elsewhere:
        # the same machine by another name, or another port: another host to the client
        for root in (elsewhere.url.replace("127.0.0.1", "localhost"), elsewhere.url):
            github.redirect_root, github.redirects = root, 1
            assert comment(tmp_path, "report") == 2
            assert elsewhere.requests == [] and elsewhere.authorizations == []
            err = capsys.readouterr().err
            assert "redirected to another host" in err and "refusing to send the token" in err
            assert github.token not in err and len(err.strip().splitlines()) == 1


def test_a_redirect_within_the_api_keeps_the_token(github: FakeGitHub, tmp_path: Path) -> None:
    # a renamed repository: GitHub answers 301 on its own host, and the call goes on
    github.redirect_root, github.redirects = github.url, 1
    assert comment(tmp_path, "report") == 0
    assert github.comments and set(github.authorizations) == {f"Bearer {github.token}"}


def test_a_next_page_link_that_loops_is_stopped_after_one_repeat(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    github.add("one")
    github.looping = True
    assert comment(tmp_path, "report") == 2
    listings = [path for method, path in github.requests if "/comments" in path]
    assert len(listings) == 1
    assert "points back to a page already read" in capsys.readouterr().err


@pytest.mark.parametrize("token", ["ghs_abc\nX-Evil: 1", "ghs_abc def", "ghs_\x07abc"])
def test_a_token_with_a_newline_or_space_is_refused_without_echoing_it(
    github: FakeGitHub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    token: str,
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", token)
    assert comment(tmp_path, "report") == 2
    err = capsys.readouterr().err
    assert "holds a space, a newline or a control character" in err
    assert "ghs_" not in err and github.requests == []


def test_an_api_that_does_not_answer_is_named_without_its_credentials() -> None:
    """A wrong GITHUB_API_URL said where it points (the error said `GET /user` alone)."""
    from perfguard.github import Client, GitHubError

    client = Client(token="ghs_" + "x" * 36, api="http://user:secret@127.0.0.1:9", attempts=1)
    with pytest.raises(GitHubError, match=r"GET /user at http://127\.0\.0\.1:9: ") as caught:
        client.request("GET", "/user")
    assert "secret" not in str(caught.value)
