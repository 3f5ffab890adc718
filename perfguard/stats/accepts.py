"""Accepting a known change: a pull request says which regressions it means, up to how much.

The accepts live in a file committed with the change (`perfguard-accept.toml` at the root),
so they are reviewed with the code, as the code is (CODEOWNERS can require a perf owner for
that file). An entry counts only where it is introduced: in the run of the pull request that
adds it (its base does not have it) and at the commit where it lands on main. A later pull
request finds it in its base already, and nothing of it applies there.

    [[accept]]
    test = "tests/test_models.py::test_mlp"   # a test id; * matches any run of characters
    variant = "*"                              # optional: every variant
    metric = ["latency_p50_ms", "latency_p95_ms"]
    up_to = "+150%"                            # or a size for memory: "+200 MiB"
    reason = "the MLP is twice as wide for the new head"

A regression of a named test, variant and metric whose change is within `up_to` becomes
`accepted`, which the gate passes; one beyond it stays a regression and says so. Nothing else
is touched. A file that does not read as this is an error of the run, never a silent pass.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfguard.errors import PerfguardError
from perfguard.records import METRICS, Accepted, Comparison, reason

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ACCEPT_FILE = "perfguard-accept.toml"
SIZE_METRICS = ("peak_memory_bytes", "memory_growth_bytes_per_call")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
_BOUND = re.compile(r"\+\s*(\d+(?:\.\d+)?)\s*(%|B|KiB|MiB|GiB|KB|MB|GB)")
_KEYS = {"test", "variant", "metric", "up_to", "reason"}


class AcceptError(PerfguardError, ValueError):
    """The accept file does not read as accepts: the run says so and accepts nothing."""


@dataclass(frozen=True, kw_only=True)
class Accept:
    """One entry: which comparisons, up to how much, and why."""

    test: str  # a pattern: * matches any run of characters, nothing else is special
    variant: str
    metrics: tuple[str, ...]
    bound: str  # as written: "+150%", "+200 MiB"
    limit: float  # percent, or bytes
    size: bool  # the limit is bytes, not percent
    reason: str
    by: str = ""  # who added it (the commit's author)

    def covers(self, c: Comparison) -> bool:
        return (
            c.metric in self.metrics
            and _match(self.test, c.test)
            and (self.variant == "*" or _match(self.variant, c.variant))
        )

    def allows(self, c: Comparison) -> bool:
        """The change is within the bound."""
        if self.size:
            if c.baseline is None or c.current is None:
                return False
            return c.current - c.baseline <= self.limit
        return c.change_pct is not None and c.change_pct <= self.limit

    def record(self) -> Accepted:
        return Accepted(bound=self.bound, reason=self.reason, by=self.by)


def _match(pattern: str, text: str) -> bool:
    """`*` is the one wildcard (a test id holds `[` and `?`, which fnmatch would read)."""
    return fnmatch.fnmatchcase(text, pattern.replace("[", "[[]").replace("?", "[?]"))


MAX_PERCENT = 1000.0  # an accepted rise past +1000% is no bound (the gate's own bars stop there)
MAX_BYTES = 2**40  # nor one past a TiB of memory
_EVERYTHING = ("a/b.py::c", "q9z/x8y.py::w7v[eager]", "zz.py::Kk::t_0[1-2]")
"""Test ids unlike any suite's: a pattern that matches one of them matches every test."""


def parse(text: str, source: str = ACCEPT_FILE) -> list[Accept]:
    """The entries of an accept file; AcceptError naming the entry and what is wrong."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AcceptError(f"{source}: not TOML ({exc})") from None
    except RecursionError:
        raise AcceptError(f"{source}: nested too deeply to be an accept file") from None
    unknown = set(doc) - {"accept"}
    if unknown:
        raise AcceptError(f"{source}: unknown table {sorted(unknown)[0]!r} (only [[accept]])")
    entries = doc.get("accept", [])
    if not isinstance(entries, list):
        raise AcceptError(f"{source}: write each entry as [[accept]]")
    return [_entry(e, f"{source}, accept #{i + 1}") for i, e in enumerate(entries)]


def _entry(raw: object, where: str) -> Accept:
    if not isinstance(raw, dict):
        raise AcceptError(f"{where}: not a table")
    extra = set(raw) - _KEYS
    if extra:
        raise AcceptError(f"{where}: unknown key {sorted(extra)[0]!r} (keys: {sorted(_KEYS)})")
    for key in ("test", "metric", "up_to", "reason"):
        if key not in raw:
            raise AcceptError(f"{where}: {key} is missing")
    test, variant, reason = raw["test"], raw.get("variant", "*"), raw["reason"]
    for key, value in (("test", test), ("variant", variant), ("reason", reason)):
        if not isinstance(value, str) or not value.strip():
            raise AcceptError(f"{where}: {key} must be a non-empty string, got {value!r}")
    if any(_match(test.strip(), probe) for probe in _EVERYTHING):
        raise AcceptError(f"{where}: test = {test!r} would accept every test: name the tests")
    metrics = raw["metric"] if isinstance(raw["metric"], list) else [raw["metric"]]
    if not metrics:
        raise AcceptError(f"{where}: metric = [] names no metric: name the ones accepted")
    for metric in metrics:
        if metric not in METRICS:
            raise AcceptError(f"{where}: metric {metric!r} is not one of {', '.join(METRICS)}")
    bound = raw["up_to"]
    found = _BOUND.fullmatch(bound.strip()) if isinstance(bound, str) else None
    if found is None:
        raise AcceptError(f"{where}: up_to must be a rise like '+15%' or '+200 MiB', got {bound!r}")
    size = found.group(2) != "%"
    limit = float(found.group(1)) * (_UNITS[found.group(2)] if size else 1)
    if not limit <= (MAX_BYTES if size else MAX_PERCENT):
        most = "+1 TiB" if size else f"+{MAX_PERCENT:g}%"
        raise AcceptError(f"{where}: up_to {bound.strip()[:40]!r} is no bound: at most {most}")
    if size and any(m not in SIZE_METRICS for m in metrics):
        raise AcceptError(f"{where}: a size ({bound}) bounds only {', '.join(SIZE_METRICS)}")
    return Accept(
        test=test.strip(),
        variant=variant.strip(),
        metrics=tuple(dict.fromkeys(metrics)),
        bound=bound.strip(),
        limit=limit,
        size=size,
        reason=" ".join(reason.split()),
    )


_TABLE = re.compile(r"""^[ \t]*\[\[[ \t]*(accept|"accept"|'accept')[ \t]*\]\]""", re.MULTILINE)
"""An `[[accept]]` header as TOML allows it written (`[[ accept ]]`, `[[ "accept" ]]` too)."""


def parse_each(text: str, source: str = ACCEPT_FILE) -> list[Accept]:
    """The entries of a file that may not read as a whole (a base's broken file): each
    `[[accept]]` table that reads on its own."""
    try:
        return parse(text, source)
    except AcceptError:
        pass
    found = []
    for chunk in _TABLE.split(text)[1:]:
        try:
            found.extend(parse("[[accept]]" + chunk, source))
        except AcceptError:
            continue
    return found


def introduced(head: Sequence[Accept], base: Sequence[Accept]) -> list[Accept]:
    """What HEAD's file accepts that its base's file does not: by meaning (which tests,
    variants and metrics, up to how much), not by how it is written. Rewording a reason,
    reordering metrics, writing `+50.0%` for `+50%`, splitting one entry into one per metric,
    an equivalent pattern (`**` for `*`), a narrower one (one variant where the base had
    all) or a lower bound gives an old entry nothing new; an entry keeps only the metrics
    no base entry already allows it for (none: not introduced)."""
    out = []
    for a in head:
        new = tuple(m for m in a.metrics if not any(_allowed_by(b, a, m) for b in base))
        if new:
            out.append(replace(a, metrics=new))
    return out


def _allowed_by(base: Accept, head: Accept, metric: str) -> bool:
    """Whether the base's entry already accepts all the head's entry does for `metric`."""
    return (
        metric in base.metrics
        and base.size == head.size
        and base.limit >= head.limit
        and _within(head.test, base.test)
        and _within(head.variant, base.variant)
    )


def _within(narrow: str, wide: str) -> bool:
    """Whether every name pattern `narrow` matches is matched by `wide` too (`*` the one
    wildcard): the same pattern (runs of `*` as one), a name `wide` matches, or `*`."""
    narrow, wide = _plain(narrow), _plain(wide)
    return narrow == wide or wide == "*" or ("*" not in narrow and _match(wide, narrow))


def _plain(pattern: str) -> str:
    return re.sub(r"\*+", "*", pattern)


def too_wide(accepts: Sequence[Accept], tests: Sequence[str]) -> str | None:
    """Why an entry accepts too much of this run: its pattern matches every one of the
    run's (two or more) tests, as `*test*` or `tests/*` do. None: each names some."""
    ids = sorted(set(tests))
    if len(ids) < 2:
        return None
    for a in accepts:
        if all(_match(a.test, t) for t in ids):
            return (
                f"{ACCEPT_FILE}: test = {a.test!r} matches every one of this run's "
                f"{len(ids)} perf tests: name the tests it accepts"
            )
    return None


def apply(comparisons: Sequence[Comparison], accepts: Sequence[Accept]) -> list[Comparison]:
    """Regressions an entry covers and allows become `accepted`; covered ones beyond the
    bound stay regressions, with a note naming the bound they passed."""
    out = []
    for c in comparisons:
        if c.verdict == "regression" and c.gating:
            covering = [a for a in accepts if a.covers(c)]
            allowing = next((a for a in covering if a.allows(c)), None)
            if allowing is not None:
                c = replace(c, verdict="accepted", accepted=allowing.record())
            elif covering:
                c = c.with_reason(reason("beyond_accepted", bound=covering[0].bound))
        out.append(c)
    return out
