"""What GitHub's answers mean, as its REST documentation says: headers read without regard to
case (GitHub sends them in lowercase); a 403 or 429 that is a rate limit (how long to wait,
and which limit) told apart from one for want of permission; the permission a request needs;
GitHub's own message and the one-line hint a user reads. Pure functions, no I/O."""

from __future__ import annotations

import json
import re
import time
import urllib.error
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

SECONDARY_WAIT_S = 60.0  # GitHub: "wait for at least one minute", then exponentially longer
WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})
INTEGRATION_403 = "Resource not accessible by integration"  # an app token's (Actions') refusal


class Headers(Mapping[str, str]):
    """A response's headers, looked up as HTTP defines them: without regard to case."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items = {k.lower(): v for k, v in items}

    def __getitem__(self, key: str) -> str:
        return self._items[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class RateLimit:
    """A rate-limited answer: which limit, how long GitHub asks to wait, when it resets."""

    kind: str  # "primary" (no request left until the reset) or "secondary"
    wait_s: float
    resets_at: float | None = None  # epoch seconds, when GitHub said


def rate_limit(
    status: int, headers: Mapping[str, str], answer: str, now: float, repeats: int
) -> RateLimit | None:
    """What a 403 or 429 asks, as GitHub documents it, or None for a plain refusal (a 403 for
    want of permission). `repeats`: secondary limits met before in this command."""
    if status not in (403, 429):
        return None
    primary = headers.get("x-ratelimit-remaining") == "0"
    kind = "primary" if primary else "secondary"
    retry_after = _number(headers.get("retry-after"))
    if retry_after is not None:
        return RateLimit(kind, max(retry_after, 0.0), now + max(retry_after, 0.0))
    reset = _number(headers.get("x-ratelimit-reset"))
    if primary and reset is not None:
        return RateLimit(kind, max(reset - now, 0.0) + 1.0, reset)
    if primary or status == 429 or "rate limit" in answer.lower():
        return RateLimit(kind, SECONDARY_WAIT_S * 2**repeats)
    return None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def clock_time(epoch: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(epoch))


def permission(method: str, path: str) -> str:
    """The token permission a request needs: a PR's comments are `pull-requests`, the alert's
    issues `issues`; `write` for a write, `read` otherwise."""
    level = "write" if method in WRITES else "read"
    if re.search(r"/issues/(\d+/)?comments", path):
        return f"pull-requests: {level}"
    if re.search(r"/repos/[^/]+/[^/]+/issues(/\d+)?$", path):
        return f"issues: {level}"
    return f"contents: {level}"


def error_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
        message = body.get("message") if isinstance(body, dict) else None
    except (ValueError, OSError):
        message = None
    return " ".join(str(message or exc.reason or "").split())


def hint(code: int, answer: str, method: str, path: str) -> str:
    if code == 403 and INTEGRATION_403.lower() in answer.lower():
        return (
            f" (the job's token lacks a permission: give the job "
            f"`permissions: {permission(method, path)}`)"
        )
    return {
        401: " (the token in GITHUB_TOKEN was refused; is it set and still valid?)",
        403: f" (the token lacks permission: it needs `{permission(method, path)}`)",
        404: " (no such repository, pull request or issue, or the token cannot see it)",
    }.get(code, "")
