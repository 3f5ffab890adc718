"""Create or update the one perfguard comment on a pull request, through GitHub's REST API.

Only the standard library: the command runs in CI steps that need no torch. The comment is
found by a hidden marker in its body, across every page of the PR's comments, so running
the step again (a re-run, a new push) updates it instead of adding another.
"""

from __future__ import annotations

import json
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfguard.comment import COMMENT_LIMIT, MARKER
from perfguard.errors import PerfguardError

DEFAULT_API = "https://api.github.com"
USER_AGENT = "perfguard"
MAX_PAGES = 1_000  # of a listing: 100,000 comments or issues, at 100 a page
_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


ACTIONS_BOT = "github-actions[bot]"  # who Actions' GITHUB_TOKEN posts as


class GitHubError(PerfguardError):
    """A request GitHub refused, or that kept failing: one line, never with the token."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status, when GitHub answered


@dataclass
class Client:
    """A small GitHub REST client with retries on 5xx and rate limits."""

    token: str
    api: str = DEFAULT_API
    attempts: int = 5
    backoff_s: float = 1.0
    max_wait_s: float = 60.0
    timeout_s: float = 30.0
    sleep: Callable[[float], None] | None = field(default=None, repr=False)  # time.sleep
    log: Callable[[str], None] = field(default=lambda _: None, repr=False)

    def __post_init__(self) -> None:
        self.api = self.api.rstrip("/")
        if any(c.isspace() or not c.isprintable() for c in self.token):
            # never echoed: http.client's own error would print the whole header
            raise GitHubError(
                "the token (GITHUB_TOKEN) holds a space, a newline or a control character: "
                "it was copied with more than the token"
            )
        self._opener = urllib.request.build_opener(_SameHostRedirects(self.api))

    def _sleep(self, seconds: float) -> None:
        (self.sleep or time.sleep)(seconds)

    def _scrub(self, text: str) -> str:
        return text.replace(self.token, "***") if self.token else text

    def _wait(self, attempt: int, headers: Mapping[str, str]) -> float:
        retry_after = headers.get("Retry-After")
        if retry_after is not None:
            try:
                return min(float(retry_after), self.max_wait_s)
            except ValueError:
                pass
        if headers.get("X-RateLimit-Remaining") == "0" and headers.get("X-RateLimit-Reset"):
            try:
                reset = float(headers["X-RateLimit-Reset"]) - time.time()
                return min(max(reset, 0.0) + 1.0, self.max_wait_s)
            except ValueError:
                pass
        wait = self.backoff_s * 2**attempt * (1 + random.random() / 4)
        return float(min(wait, self.max_wait_s))

    def request(
        self, method: str, url: str, body: Mapping[str, Any] | None = None
    ) -> tuple[Any, Mapping[str, str]]:
        """JSON in, (JSON, headers) out. Raises GitHubError with a one-line reason."""
        if not url.startswith(("http://", "https://")):
            url = f"{self.api}{url}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        path = urllib.parse.urlsplit(url).path
        for attempt in range(self.attempts):
            req = urllib.request.Request(url, data=data, method=method)
            req.add_header("Authorization", f"Bearer {self.token}")
            req.add_header("Accept", "application/vnd.github+json")
            req.add_header("X-GitHub-Api-Version", "2022-11-28")
            req.add_header("User-Agent", USER_AGENT)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            try:
                with self._opener.open(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                    headers = {k: v for k, v in resp.headers.items()}
                    return (json.loads(raw) if raw else None), headers
            except urllib.error.HTTPError as exc:
                headers = {k: v for k, v in exc.headers.items()} if exc.headers else {}
                message = _error_message(exc)
                rate_limited = exc.code == 429 or (
                    exc.code == 403
                    and (headers.get("X-RateLimit-Remaining") == "0" or "Retry-After" in headers)
                )
                if (exc.code >= 500 or rate_limited) and attempt + 1 < self.attempts:
                    wait = self._wait(attempt, headers)
                    self.log(
                        f"GitHub answered {exc.code} to {method} {path}; retrying in {wait:.1f} s"
                    )
                    self._sleep(wait)
                    continue
                raise GitHubError(
                    self._scrub(f"{method} {path}: HTTP {exc.code} {message}{_hint(exc.code)}"),
                    exc.code,
                ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                if attempt + 1 < self.attempts:
                    wait = self._wait(attempt, {})
                    self.log(f"{method} {path} failed ({reason}); retrying in {wait:.1f} s")
                    self._sleep(wait)
                    continue
                where = urllib.parse.urlsplit(url)  # which API did not answer (GITHUB_API_URL)
                host = f"{where.hostname}{f':{where.port}' if where.port else ''}"  # no userinfo
                raise GitHubError(
                    self._scrub(f"{method} {path} at {where.scheme}://{host}: {reason}")
                ) from None
        raise GitHubError(f"{method} {path}: no answer after {self.attempts} attempts")


def same_origin(url: str, api: str) -> bool:
    there, home = urllib.parse.urlsplit(url), urllib.parse.urlsplit(api)
    return (there.scheme, there.netloc) == (home.scheme, home.netloc)


class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect within the API's host (a renamed repository), and refuses one to
    any other: urllib would copy the Authorization header, and the token with it, there."""

    def __init__(self, api: str) -> None:
        self.api = api

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        if not same_origin(newurl, self.api):
            where = urllib.parse.urlsplit(newurl)
            raise GitHubError(
                f"{req.get_method()} {urllib.parse.urlsplit(req.full_url).path}: the API "
                f"redirected to another host ({where.scheme}://{where.hostname}): "
                "refusing to send the token there"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
        message = body.get("message") if isinstance(body, dict) else None
    except (ValueError, OSError):
        message = None
    return " ".join(str(message or exc.reason or "").split())


def _hint(code: int) -> str:
    return {
        401: " (the token in GITHUB_TOKEN was refused; is it set and still valid?)",
        403: " (the token lacks permission: the job needs `permissions: pull-requests: write`)",
        404: " (no such repository or pull request, or the token cannot see it)",
    }.get(code, "")


def _next_link(headers: Mapping[str, str], api: str) -> str | None:
    """The next page's URL; refused when it leaves the API's host (the token goes along)."""
    link = headers.get("Link") or headers.get("link") or ""
    found = _NEXT.search(link)
    if not found:
        return None
    url = found.group(1)
    if not same_origin(url, api):
        there = urllib.parse.urlsplit(url)
        raise GitHubError(
            f"the next page is on another host ({there.scheme}://{there.hostname}, "
            f"not {urllib.parse.urlsplit(api).hostname}): refusing to send the token there"
        )
    return url


def posting_identity(client: Client) -> str:
    """The login the token posts as: GET /user, or, for an app installation token (Actions'
    GITHUB_TOKEN), which GitHub does not let ask (403), the Actions bot."""
    try:
        me, _ = client.request("GET", "/user")
    except GitHubError as exc:
        if exc.status != 403:
            raise
        return ACTIONS_BOT
    login = me.get("login") if isinstance(me, dict) else None
    if not isinstance(login, str) or not login:
        raise GitHubError("GET /user: no login in the answer")
    return login


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


def pages(client: Client, url: str) -> Iterator[Mapping[str, Any]]:
    """Every object of a listing, following `Link: rel=next` across its pages."""
    next_url: str | None = url if url.startswith(("http://", "https://")) else client.api + url
    seen: set[str] = set()
    while next_url:
        if next_url in seen or len(seen) >= MAX_PAGES:
            why = "points back to a page already read" if next_url in seen else "goes on past"
            raise GitHubError(
                f"GET {url.split('?')[0]}: the listing's next-page link {why} "
                f"({len(seen)} pages read, at most {MAX_PAGES}): stopped"
            )
        seen.add(next_url)
        page, headers = client.request("GET", next_url)
        if not isinstance(page, list):
            raise GitHubError(
                f"GET {url.split('?')[0]}: expected a list, got {type(page).__name__}"
            )
        yield from (item for item in page if isinstance(item, dict))
        next_url = _next_link(headers, client.api)


def author_of(item: Mapping[str, Any]) -> str:
    user = item.get("user")
    return str(user.get("login", "")) if isinstance(user, dict) else ""


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
    is never edited, whatever it carries: a marker is easy to quote or to forge."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise ValueError(f"--repo must be OWNER/NAME, got {repo!r}")
    body = with_marker(body, marker)
    me = author or posting_identity(client)
    found = [
        c
        for c in pages(client, f"/repos/{repo}/issues/{pr}/comments?per_page=100")
        if marker in str(c.get("body") or "")
    ]
    ours = [c for c in found if author_of(c) == me]
    foreign = len(found) - len(ours)
    if ours:
        updated, _ = client.request(
            "PATCH", f"/repos/{repo}/issues/comments/{ours[0]['id']}", {"body": body}
        )
        url_ = str((updated or {}).get("html_url", ""))
        return Posted("updated", url_, me, len(ours) - 1, foreign)
    created, _ = client.request("POST", f"/repos/{repo}/issues/{pr}/comments", {"body": body})
    return Posted("created", str((created or {}).get("html_url", "")), me, 0, foreign)
