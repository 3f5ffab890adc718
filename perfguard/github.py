"""A small client of GitHub's REST API, for the PR comment and main's alert.

Only the standard library: the commands run in CI steps that need no torch. The client waits
out rate limits as GitHub documents them (`github_answers`), every wait out of one budget per
command, past which the command stops with one line naming the limit and when it resets.
Writes are spaced a second apart, a write whose answer was lost is looked for before it is
sent again (no second comment or issue), and redirects are followed for every method within
the API's own host only, so the token never leaves it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfguard.errors import InputError, PerfguardError
from perfguard.github_answers import (
    INTEGRATION_403,
    WRITES,
    Headers,
    RateLimit,
    clock_time,
    error_message,
    hint,
    rate_limit,
)

DEFAULT_API = "https://api.github.com"
USER_AGENT = "perfguard"
MAX_PAGES = 1_000  # of a listing: 100,000 comments or issues, at 100 a page
WAIT_BUDGET_S = 300.0  # the most one command waits on rate limits, all waits together
MAX_RATE_WAITS = 10  # rate-limited answers one command waits out, whatever they ask
WRITE_GAP_S = 1.0  # GitHub: "at least one second between each request" that creates content
_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


ACTIONS_BOT = "github-actions[bot]"  # who Actions' GITHUB_TOKEN posts as


class GitHubError(PerfguardError):
    """A request GitHub refused, or that kept failing: one line, never with the token."""

    def __init__(self, message: str, status: int | None = None, answer: str = "") -> None:
        super().__init__(message)
        self.status = status  # the HTTP status, when GitHub answered
        self.answer = answer  # GitHub's own `message`, as it sent it


@dataclass
class Client:
    """A small GitHub REST client: retries on 5xx and rate limits, as GitHub documents them."""

    token: str
    api: str = DEFAULT_API
    attempts: int = 5  # of a request that fails with a 5xx or no answer
    backoff_s: float = 1.0
    max_wait_s: float = 60.0  # one wait after a 5xx or no answer
    wait_budget_s: float = WAIT_BUDGET_S  # all rate-limit waits of this client together
    timeout_s: float = 30.0
    sleep: Callable[[float], None] | None = field(default=None, repr=False)  # time.sleep
    clock: Callable[[], float] | None = field(default=None, repr=False)  # time.time
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
        self.waited_s = 0.0  # on rate limits, so far
        self._secondary = 0  # secondary limits met, for the exponential wait
        self._limited = 0  # rate-limited answers, all kinds
        self._last_write: float | None = None

    def _sleep(self, seconds: float) -> None:
        (self.sleep or time.sleep)(seconds)

    def _now(self) -> float:
        return (self.clock or time.time)()

    def _scrub(self, text: str) -> str:
        return text.replace(self.token, "***") if self.token else text

    def _backoff(self, attempt: int) -> float:
        wait = self.backoff_s * 2**attempt * (1 + random.random() / 4)
        return float(min(wait, self.max_wait_s))

    def _wait_out(self, limit: RateLimit, method: str, path: str, status: int) -> None:
        """Sleep as long as the limit asks, out of the budget; past it, one line that says
        which limit it is and when it resets."""
        left = self.wait_budget_s - self.waited_s
        self._limited += 1
        if limit.wait_s > left or self._limited > MAX_RATE_WAITS:
            when = (
                f"it resets at {clock_time(limit.resets_at)}, in {limit.wait_s:.0f} s"
                if limit.resets_at is not None
                else f"GitHub asks to wait {limit.wait_s:.0f} s before trying again"
            )
            past = (
                f"more than the {max(left, 0.0):.0f} s left of this command's "
                f"{self.wait_budget_s:.0f} s wait budget"
                if limit.wait_s > left
                else f"and it was met {MAX_RATE_WAITS} times already"
            )
            raise GitHubError(
                f"{method} {path}: HTTP {status}: GitHub's {limit.kind} rate limit for this "
                f"token; {when}, {past}: run the job again after that",
                status,
            )
        if limit.kind == "secondary":
            self._secondary += 1
        self.log(
            f"GitHub's {limit.kind} rate limit ({status} to {method} {path}); "
            f"waiting {limit.wait_s:.1f} s as it asks"
        )
        self.waited_s += limit.wait_s
        self._sleep(limit.wait_s)

    def _space_writes(self, method: str) -> None:
        if method not in WRITES:
            return
        if self._last_write is not None:
            gap = self._last_write + WRITE_GAP_S - self._now()
            if gap > 0:
                self._sleep(gap)
        self._last_write = self._now()

    def request(
        self,
        method: str,
        url: str,
        body: Mapping[str, Any] | None = None,
        *,
        recover: Callable[[], Any] | None = None,
    ) -> tuple[Any, Mapping[str, str]]:
        """JSON in, (JSON, headers) out. Raises GitHubError with a one-line reason.

        A POST creates something: when its answer is lost (a 5xx, no answer), `recover` looks
        for what the first try may have created, and its find is the answer; without
        `recover` such a POST is not sent again."""
        if not url.startswith(("http://", "https://")):
            url = f"{self.api}{url}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        path = urllib.parse.urlsplit(url).path
        failures = 0
        while True:
            req = urllib.request.Request(url, data=data, method=method)
            req.add_header("Authorization", f"Bearer {self.token}")
            req.add_header("Accept", "application/vnd.github+json")
            req.add_header("X-GitHub-Api-Version", "2022-11-28")
            req.add_header("User-Agent", USER_AGENT)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            self._space_writes(method)
            try:
                with self._opener.open(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                    return (json.loads(raw) if raw else None), Headers(resp.headers.items())
            except urllib.error.HTTPError as exc:
                headers = Headers(exc.headers.items() if exc.headers else ())
                answer = error_message(exc)
                limit = rate_limit(exc.code, headers, answer, self._now(), self._secondary)
                if limit is not None:
                    self._wait_out(limit, method, path, exc.code)
                    continue
                failures += 1
                if exc.code >= 500 and failures < self.attempts:
                    found = self._recover(method, path, f"HTTP {exc.code}", recover)
                    if found is not None:
                        return found, Headers()
                    wait = self._backoff(failures - 1)
                    self.log(
                        f"GitHub answered {exc.code} to {method} {path}; retrying in {wait:.1f} s"
                    )
                    self._sleep(wait)
                    continue
                raise GitHubError(
                    self._scrub(
                        f"{method} {path}: HTTP {exc.code} {answer}"
                        f"{hint(exc.code, answer, method, path)}"
                    ),
                    exc.code,
                    answer,
                ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                failures += 1
                if failures < self.attempts:
                    found = self._recover(method, path, str(reason), recover)
                    if found is not None:
                        return found, Headers()
                    wait = self._backoff(failures - 1)
                    self.log(f"{method} {path} failed ({reason}); retrying in {wait:.1f} s")
                    self._sleep(wait)
                    continue
                where = urllib.parse.urlsplit(url)  # which API did not answer (GITHUB_API_URL)
                host = f"{where.hostname}{f':{where.port}' if where.port else ''}"  # no userinfo
                raise GitHubError(
                    self._scrub(f"{method} {path} at {where.scheme}://{host}: {reason}")
                ) from None

    def _recover(self, method: str, path: str, why: str, recover: Callable[[], Any] | None) -> Any:
        """Before a POST is sent again: what the lost try created, found by `recover`, or
        None (send it again). A POST without `recover` is never sent twice."""
        if method != "POST":
            return None
        if recover is None:
            raise GitHubError(
                f"{method} {path}: {why}, and whether it was carried out is unknown: "
                "not sent again, so as not to make it twice; run the job again"
            )
        found = recover()
        if found is None:
            self.log(f"{method} {path}: {why}; nothing was created, sending it again")
        else:
            self.log(f"{method} {path}: {why}, but it was carried out: not sent again")
        return found


def add_wait_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-wait",
        type=float,
        default=WAIT_BUDGET_S,
        metavar="SECONDS",
        help=f"the most to wait on GitHub's rate limits, all waits together "
        f"({WAIT_BUDGET_S:.0f}; past it, one line says which limit and when it resets)",
    )


def client_from_env(args: argparse.Namespace, purpose: str) -> Client:
    """The client a command posts with: the token from GITHUB_TOKEN, the API root from
    GITHUB_API_URL (GitHub Enterprise: `https://HOST/api/v3`), `--max-wait` as its budget."""
    token = os.environ.get("GITHUB_TOKEN", "").strip()
    if not token:
        raise InputError(f"GITHUB_TOKEN is not set: {purpose} needs a token")
    if not 0 <= args.max_wait <= 6 * 3600:
        raise InputError(f"--max-wait must be 0 to 21600 seconds, got {args.max_wait:g}")
    return Client(
        token,
        api=os.environ.get("GITHUB_API_URL") or DEFAULT_API,
        wait_budget_s=args.max_wait,
        log=lambda line: print(line, file=sys.stderr),
    )


def same_origin(url: str, api: str) -> bool:
    there, home = urllib.parse.urlsplit(url), urllib.parse.urlsplit(api)
    return (there.scheme, there.netloc) == (home.scheme, home.netloc)


class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect within the API's host (a renamed or transferred repository) for
    every method, sending the request again as it was (GitHub: "the request should be
    repeated verbatim"; a 303 alone becomes a GET), and refuses one to any other host:
    urllib would copy the Authorization header, and the token with it, there."""

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
        method = req.get_method()
        if not same_origin(newurl, self.api):
            where = urllib.parse.urlsplit(newurl)
            raise GitHubError(
                f"{method} {urllib.parse.urlsplit(req.full_url).path}: the API "
                f"redirected to another host ({where.scheme}://{where.hostname}): "
                "refusing to send the token there"
            )
        if code not in (301, 302, 303, 307, 308):
            return None
        kept = {k: v for k, v in req.header_items()}
        if code == 303:  # "see other": fetch the answer, send nothing again
            method, data = "GET", None
            kept = {k: v for k, v in kept.items() if k.lower() not in ("content-type",)}
        else:
            data = req.data
        kept.pop("Content-length", None)
        return urllib.request.Request(
            newurl.replace(" ", "%20"), data=data, headers=kept, method=method
        )


def _next_link(headers: Mapping[str, str], api: str) -> str | None:
    """The next page's URL; refused when it leaves the API's host (the token goes along)."""
    found = _NEXT.search(headers.get("link") or "")
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
    GITHUB_TOKEN), which GitHub does not let ask ("Resource not accessible by integration"),
    the Actions bot. Any other refusal (a user token rate-limited, revoked) is an error: taken
    for the bot, the run would post a second comment beside the token's own."""
    try:
        me, _ = client.request("GET", "/user")
    except GitHubError as exc:
        if exc.status == 403 and exc.answer.lower() == INTEGRATION_403.lower():
            return ACTIONS_BOT
        raise
    login = me.get("login") if isinstance(me, dict) else None
    if not isinstance(login, str) or not login:
        raise GitHubError("GET /user: no login in the answer")
    return login


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
