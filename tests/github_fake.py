"""A local stand-in for the parts of GitHub's REST API that `perfguard comment` uses."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class FakeGitHub:
    token: str = "ghs_secret_token_value"
    repo: str = "octo/models"
    pr: int = 7
    page_size: int = 100  # the server's cap on per_page, to force pagination in tests
    comments: list[dict[str, Any]] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)  # status codes to answer first
    forbidden: bool = False  # a token without the permission: 403 on every call
    requests: list[tuple[str, str]] = field(default_factory=list)
    next_id: int = 1000
    login: str = "github-actions[bot]"  # who the token posts as
    app_token: bool = True  # like Actions' GITHUB_TOKEN: GET /user is refused
    next_root: str | None = None  # where `Link: rel="next"` points (default: this server)
    issues: list[dict[str, Any]] = field(default_factory=list)  # open issues and pull requests
    redirect_root: str | None = None  # answer the next `redirects` requests with a 302 there
    redirects: int = 0
    looping: bool = False  # a listing's `Link: rel="next"` points at the page itself
    authorizations: list[str] = field(default_factory=list)  # Authorization headers received

    def __enter__(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def _handle(self, method: str) -> None:
                fake.requests.append((method, self.path))
                fake.authorizations.append(self.headers.get("Authorization") or "")
                if fake.redirects > 0:
                    fake.redirects -= 1
                    self.send_response(302)
                    self.send_header("Location", f"{fake.redirect_root}{self.path}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if fake.failures:
                    code = fake.failures.pop(0)
                    headers = {"Retry-After": "0"} if code in (403, 429) else {}
                    self._send(code, {"message": f"fake failure {code}"}, headers)
                    return
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self._send(401, {"message": "Bad credentials"})
                    return
                if fake.forbidden:
                    self._send(403, {"message": "Resource not accessible by integration"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.route(self, method, body)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
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

    def add_issue(self, title: str, body: str, author: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        login = author or "a-human"
        issue = {
            "number": self.next_id,
            "title": title,
            "body": body,
            "state": "open",
            "user": {"login": login},
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
            headers["Link"] = f'<{nxt}>; rel="next", <{nxt}>; rel="last"'
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
            state = parse_qs(parts.query).get("state", ["open"])[0]
            self._page(h, [i for i in self.issues if state == "all" or i["state"] == state])
        elif listing and method == "POST":
            h._send(201, self.add_issue(body["title"], body["body"], author=self.login))
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
            if self.app_token:
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
                headers["Link"] = f'<{itself}>; rel="next"'
            elif page * per_page < len(self.comments):
                nxt = (
                    f"{self.next_root or self.url}{parts.path}?per_page={per_page}&page={page + 1}"
                )
                headers["Link"] = f'<{nxt}>; rel="next", <{nxt}>; rel="last"'
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
