"""A local stand-in for the parts of GitHub's REST API that `perfguard comment` and `alert`
use, answering as GitHub does: header names in lowercase, issue listings newest first (and
as `sort`/`direction` ask), rate limits with GitHub's own headers and bodies."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

SECONDARY = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
    "again. If you reach out to GitHub Support for help, please include the request ID."
)
PRIMARY = "API rate limit exceeded for installation ID 1."


@dataclass(frozen=True)
class Answer:
    """One answer to give first, whatever the request: a status, headers, GitHub's message.
    `then_apply`: the request is carried out, then this answer is sent instead of its own
    (an answer lost on the way)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = ""
    then_apply: bool = False
    method: str | None = None  # given to the first request of this method only


def secondary_limit(retry_after: float | None = None) -> Answer:
    headers = {"x-ratelimit-remaining": "4990", "x-ratelimit-limit": "5000"}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    return Answer(403, headers, SECONDARY)


def primary_limit(reset_at: float, status: int = 403) -> Answer:
    headers = {
        "x-ratelimit-remaining": "0",
        "x-ratelimit-limit": "1000",
        "x-ratelimit-used": "1000",
        "x-ratelimit-reset": str(int(reset_at)),
        "x-ratelimit-resource": "core",
    }
    return Answer(status, headers, PRIMARY)


def default_answer(code: int) -> Answer:
    """A bare status code given as a failure: a rate limit for 403/429 (with `retry-after: 0`,
    as GitHub sends it), a server error otherwise."""
    if code in (403, 429):
        return Answer(code, {"retry-after": "0"}, SECONDARY)
    return Answer(code, {}, f"fake failure {code}")


@dataclass
class FakeGitHub:
    token: str = "ghs_secret_token_value"
    repo: str = "octo/models"
    pr: int = 7
    page_size: int = 100  # the server's cap on per_page, to force pagination in tests
    comments: list[dict[str, Any]] = field(default_factory=list)
    failures: list[int | Answer] = field(default_factory=list)  # answers to give first
    forbidden: bool = False  # a token without the permission: 403 on every call
    read_only: bool = False  # a token that may read but not write: 403 on every write
    requests: list[tuple[str, str]] = field(default_factory=list)
    next_id: int = 1000
    login: str = "github-actions[bot]"  # who the token posts as
    app_token: bool = True  # like Actions' GITHUB_TOKEN: GET /user is refused
    next_root: str | None = None  # where `Link: rel="next"` points (default: this server)
    issues: list[dict[str, Any]] = field(default_factory=list)  # open issues and pull requests
    redirect_root: str | None = None  # answer the next `redirects` requests with a redirect
    redirects: int = 0
    redirect_code: int = 302
    redirect_method: str | None = None  # redirect requests of this method only
    user_answer: Answer | None = None  # GET /user's answer, when not the usual one
    looping: bool = False  # a listing's `Link: rel="next"` points at the page itself
    authorizations: list[str] = field(default_factory=list)  # Authorization headers received
    bodies: list[bytes] = field(default_factory=list)  # the bodies received, in order
    label_rights: bool = True  # False: labels on a new issue are dropped (no push access)

    def __enter__(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(body).encode()
                if self.delayed is not None:  # carried out; this answer is sent instead
                    code, raw, headers = self.delayed
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k.lower(), v)  # GitHub sends every header in lowercase
                self.end_headers()
                self.wfile.write(raw)

            delayed: tuple[int, bytes, dict[str, str]] | None = None

            def _handle(self, method: str) -> None:
                fake.requests.append((method, self.path))
                fake.authorizations.append(self.headers.get("Authorization") or "")
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                fake.bodies.append(raw)
                if fake.redirects > 0 and fake.redirect_method in (None, method):
                    fake.redirects -= 1
                    self.send_response(fake.redirect_code)
                    self.send_header("location", f"{fake.redirect_root}{self.path}")
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                first = fake.failures[0] if fake.failures else None
                answer = default_answer(first) if isinstance(first, int) else first
                if answer is not None and answer.method in (None, method):
                    fake.failures.pop(0)
                    if not answer.then_apply:
                        self._send(answer.status, {"message": answer.message}, answer.headers)
                        return
                    message = json.dumps({"message": answer.message}).encode()
                    self.delayed = (answer.status, message, answer.headers)
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self._send(401, {"message": "Bad credentials"})
                    return
                if fake.forbidden or (fake.read_only and method != "GET"):
                    self._send(403, {"message": "Resource not accessible by integration"})
                    return
                fake.route(self, method, json.loads(raw) if raw else None)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        # (shutdown waits for the loop's next poll: half a second by default, for every test)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, body: str, author: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        login = author or "a-human"
        comment = {
            "id": self.next_id,
            "body": body,
            "user": {"login": login, "type": "Bot" if login.endswith("[bot]") else "User"},
            "html_url": f"https://github.test/{self.repo}/pull/{self.pr}#c{self.next_id}",
        }
        self.comments.append(comment)
        return comment

    def add_issue(
        self, title: str, body: str, author: str | None = None, labels: list[str] | None = None
    ) -> dict[str, Any]:
        self.next_id += 1
        login = author or "a-human"
        issue = {
            "number": self.next_id,
            "title": title,
            "body": body,
            "state": "open",
            "user": {"login": login},
            "labels": [{"name": name} for name in labels or ()],
            "html_url": f"https://github.test/{self.repo}/issues/{self.next_id}",
        }
        self.issues.append(issue)
        return issue

    def _page(self, h: Any, items: list[dict[str, Any]]) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query)
        per_page = min(int(query.get("per_page", ["30"])[0]), self.page_size)
        page = int(query.get("page", ["1"])[0])
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            rest = "&".join(f"{k}={v[0]}" for k, v in query.items() if k != "page")
            nxt = f"{self.next_root or self.url}{parts.path}?{rest}&page={page + 1}"
            headers["link"] = f'<{nxt}>; rel="next", <{nxt}>; rel="last"'
        h._send(200, chunk, headers)

    def route_issues(self, h: Any, method: str, body: Any) -> bool:
        """The issues API: list the open ones, open one, edit one. False: not an issue URL."""
        parts = urlsplit(h.path)
        listing = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues", parts.path)
        single = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)", parts.path)
        match = listing or single
        if match is None:
            return False
        if match.group(1) != self.repo:
            h._send(404, {"message": "Not Found"})
        elif listing and method == "GET":
            query = parse_qs(parts.query)
            state = query.get("state", ["open"])[0]
            wanted = set(query["labels"][0].split(",")) if "labels" in query else set()
            found = [
                i
                for i in self.issues
                if (state == "all" or i["state"] == state)
                and wanted <= {label["name"] for label in i.get("labels", ())}
            ]
            # GitHub's default: sort=created, direction=desc (newest first)
            newest_first = query.get("direction", ["desc"])[0] == "desc"
            self._page(h, sorted(found, key=lambda i: i["number"], reverse=newest_first))
        elif listing and method == "POST":
            if len(body["title"]) > 256:
                h._send(422, {"message": "Validation Failed", "errors": [{"field": "title"}]})
                return True
            labels = list(body.get("labels") or ()) if self.label_rights else []
            h._send(201, self.add_issue(body["title"], body["body"], self.login, labels))
        elif single and method == "PATCH":
            for issue in self.issues:
                if issue["number"] == int(single.group(2)):
                    issue.update({k: body[k] for k in ("title", "body", "state") if k in body})
                    h._send(200, issue)
                    return True
            h._send(404, {"message": "Not Found"})
        else:
            h._send(404, {"message": "Not Found"})
        return True

    def route(self, h: Any, method: str, body: Any) -> None:
        parts = urlsplit(h.path)
        if self.route_issues(h, method, body):
            return
        listing = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments", parts.path)
        single = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)", parts.path)
        if parts.path == "/user" and method == "GET":
            if self.user_answer is not None:
                a = self.user_answer
                h._send(a.status, {"message": a.message}, a.headers)
            elif self.app_token:
                h._send(403, {"message": "Resource not accessible by integration"})
            else:
                h._send(200, {"login": self.login})
        elif listing and (listing.group(1) != self.repo or int(listing.group(2)) != self.pr):
            h._send(404, {"message": "Not Found"})
        elif listing and method == "GET":
            query = parse_qs(parts.query)
            per_page = min(int(query.get("per_page", ["30"])[0]), self.page_size)
            page = int(query.get("page", ["1"])[0])
            chunk = self.comments[(page - 1) * per_page : page * per_page]
            headers = {}
            if self.looping:
                itself = f"{self.url}{h.path}"
                headers["link"] = f'<{itself}>; rel="next"'
            elif page * per_page < len(self.comments):
                nxt = (
                    f"{self.next_root or self.url}{parts.path}?per_page={per_page}&page={page + 1}"
                )
                headers["link"] = f'<{nxt}>; rel="next", <{nxt}>; rel="last"'
            h._send(200, chunk, headers)
        elif listing and method == "POST":
            h._send(201, self.add(body["body"], author=self.login))
        elif single and method == "PATCH":
            for c in self.comments:
                if c["id"] == int(single.group(2)):
                    c["body"] = body["body"]
                    h._send(200, c)
                    return
            h._send(404, {"message": "Not Found"})
        else:
            h._send(404, {"message": "Not Found"})
