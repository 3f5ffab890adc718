"""One metric compared, baseline against current, with its verdict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from perfguard.records.base import (
    METRICS,
    VERDICTS,
    Metric,
    RecordError,
    Verdict,
    finite_or_none,
    flag,
    numbers,
    text,
    texts,
)
from perfguard.records.reasons import Reason, render
from perfguard.records.sites import SiteChange, changes_from_json

ConfirmKind = Literal["shown", "not_shown", "unconfirmed", "settled", "unsettled", "not_settled"]
CONFIRM_KINDS: tuple[ConfirmKind, ...] = (
    "shown",  # a flagged verdict every round showed again: it stands
    "not_shown",  # a round did not show it: inconclusive
    "unconfirmed",  # a round could not be made, or failed its own checks: as it was
    "settled",  # an undecided item every round beside the base commit decided the same way
    "unsettled",  # the rounds beside the base commit did not decide it that way
    "not_settled",  # the rounds beside the base commit could not judge it
)
Scope = Literal["metric", "item"]
SCOPES: tuple[Scope, ...] = ("metric", "item")
BESIDE = "beside the base commit"
FRESH = "in a fresh process"


@dataclass(frozen=True, kw_only=True)
class Confirmation:
    """What measuring a comparison's item again showed (stored-baseline mode). The report's
    words come from it (`text`); readers and tests use the fields."""

    kind: ConfirmKind
    where: tuple[str, ...] = ()  # how the rounds measured it: BESIDE, FRESH
    changes: tuple[float | None, ...] = ()  # the change each round saw (None: no figure)
    paired: tuple[str, ...] = ()  # verdicts of the rounds beside the base commit that
    # did not show it (not_shown), or that it was left with (unsettled)
    bar_pct: float | None = None  # the practical bar a fresh-process round had to reach
    reason: str = ""  # unconfirmed, not_settled: why

    def __post_init__(self) -> None:
        if self.kind not in CONFIRM_KINDS:
            raise RecordError(f"confirmation kind must be one of {CONFIRM_KINDS}")
        object.__setattr__(self, "where", tuple(str(w) for w in self.where))
        object.__setattr__(
            self, "changes", tuple(finite_or_none("changes", v) for v in self.changes)
        )
        object.__setattr__(self, "paired", tuple(str(v) for v in self.paired))

    def text(self) -> str:
        seen = ", ".join(f"{x:+.1f}%" for x in self.changes if x is not None)
        where = " and ".join(sorted(self.where, reverse=True))
        if self.kind == "shown":
            return f"shown again {where} ({seen})"
        if self.kind == "not_shown":
            bars = [f"bar {self.bar_pct:.1f}%"] if self.bar_pct is not None else []
            said = [f"A/B: {v}" for v in self.paired]
            return f"not shown again {where} ({'; '.join([seen, *bars, *said])})"
        if self.kind == "unconfirmed":
            return f"unconfirmed ({self.reason})"
        if self.kind == "settled":
            return f"shown beside the base commit ({seen})"
        if self.kind == "unsettled":
            return f"beside the base commit: {', '.join(sorted(set(self.paired)))} ({seen})"
        return f"not settled ({self.reason})"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "where": list(self.where),
            "changes": list(self.changes),
            "paired": list(self.paired),
            "bar_pct": self.bar_pct,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Any) -> Confirmation:
        if not isinstance(data, Mapping):
            raise RecordError(f"a confirmation must be an object, got {data!r}")
        try:
            return cls(
                kind=data["kind"],
                where=texts("confirmation.where", data.get("where")),
                changes=numbers("confirmation.changes", data.get("changes")),
                paired=texts("confirmation.paired", data.get("paired")),
                bar_pct=finite_or_none("bar_pct", data.get("bar_pct")),
                reason=text("confirmation.reason", data.get("reason") or ""),
            )
        except KeyError as exc:
            raise RecordError(f"a confirmation lacks the key {exc.args[0]!r}") from exc


@dataclass(frozen=True, kw_only=True)
class Accepted:
    """Why a regression is `accepted`: the bound the pull request set, its reason, and who
    added the entry."""

    bound: str  # as written: "+150%", "+200 MiB"
    reason: str
    by: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"bound": self.bound, "reason": self.reason, "by": self.by}

    @classmethod
    def from_json(cls, data: Any) -> Accepted:
        if not isinstance(data, Mapping):
            raise RecordError(f"accepted must be an object, got {data!r}")
        return cls(
            bound=text("accepted.bound", data.get("bound")),
            reason=text("accepted.reason", data.get("reason")),
            by=text("accepted.by", data.get("by") or ""),
        )


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """One metric of one test and variant, baseline against current, with its verdict."""

    test: str
    variant: str
    metric: Metric
    baseline: float | None
    current: float | None
    change_pct: float | None
    p_value: float | None
    cohens_d: float | None
    verdict: Verdict
    min_detectable_pct: float | None = None
    gating: bool = True
    reasons: tuple[Reason, ...] = ()  # why it reads as it does; `note` is their words
    # "item": a row saying what became of the item as a whole (new, missing, error), not
    # how a metric moved; its metric is latency_p50_ms (the results format's contract)
    scope: Scope = "metric"
    trend: tuple[tuple[str, float], ...] = ()  # (commit, value) of recent baselines, oldest first
    baseline_ci: tuple[float, float] | None = None  # 95% bootstrap interval over repeats
    current_ci: tuple[float, float] | None = None
    # a paired (same-job A/B) latency change's interval, in percent, at the level it stopped at
    change_ci: tuple[float, float] | None = None
    # the change seen again by each confirmation re-measure (fresh process, same baseline);
    # with `confirmation`, its `changes`
    confirm_change_pct: tuple[float | None, ...] = ()
    # a latency regression's operators by change in self time: (operator, base µs, head µs)
    # per call; None on the side where the operator did not appear
    why: tuple[tuple[str, float | None, float | None], ...] = ()
    confirmation: Confirmation | None = None  # what measuring the item again showed
    accepted: Accepted | None = None  # the verdict `accepted`: what the pull request said
    # a memory verdict's allocation sites whose live bytes changed most, base against head
    sites: tuple[SiteChange, ...] = ()

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise RecordError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if self.verdict not in VERDICTS:
            raise RecordError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.scope not in SCOPES:
            raise RecordError(f"scope must be one of {SCOPES}, got {self.scope!r}")
        if (self.verdict == "accepted") != (self.accepted is not None):
            raise RecordError("an accepted verdict, and only one, says what accepted it")
        for name in ("baseline", "current", "change_pct", "p_value", "cohens_d"):
            object.__setattr__(self, name, finite_or_none(name, getattr(self, name)))
        points = []
        for commit, value in self.trend:
            checked = finite_or_none("trend", value)
            if checked is not None:
                points.append((str(commit), checked))
        object.__setattr__(self, "trend", tuple(points))
        changes = self.confirm_change_pct
        if self.confirmation is not None:
            changes = self.confirmation.changes
        object.__setattr__(
            self,
            "confirm_change_pct",
            tuple(finite_or_none("confirm_change_pct", v) for v in changes),
        )
        for name in ("baseline_ci", "current_ci", "change_ci"):
            ci = getattr(self, name)
            if ci is not None:
                low, high = (finite_or_none(name, v) for v in ci)
                if low is None or high is None or low > high:
                    raise RecordError(f"{name} must be [low, high], got {ci!r}")
                object.__setattr__(self, name, (low, high))

    @property
    def note(self) -> str:
        """The reasons in words ("; " between)."""
        confirmation = self.confirmation
        return render(self.reasons, None if confirmation is None else confirmation.text)

    def with_reason(self, found: Reason) -> Comparison:
        return replace(self, reasons=(*self.reasons, found))

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "variant": self.variant,
            "metric": self.metric,
            "baseline": self.baseline,
            "current": self.current,
            "change_pct": self.change_pct,
            "p_value": self.p_value,
            "cohens_d": self.cohens_d,
            "verdict": self.verdict,
            "min_detectable_pct": self.min_detectable_pct,
            "gating": self.gating,
            "note": self.note,
            "reasons": [r.to_json() for r in self.reasons],
            **({"scope": self.scope} if self.scope != "metric" else {}),
            **({"trend": [list(point) for point in self.trend]} if self.trend else {}),
            **(
                {"confirm_change_pct": list(self.confirm_change_pct)}
                if self.confirm_change_pct
                else {}
            ),
            **({"why": [list(row) for row in self.why]} if self.why else {}),
            **(
                {"confirmation": self.confirmation.to_json()}
                if self.confirmation is not None
                else {}
            ),
            **{
                name: list(getattr(self, name))
                for name in ("baseline_ci", "current_ci", "change_ci")
                if getattr(self, name) is not None
            },
            **({"accepted": self.accepted.to_json()} if self.accepted is not None else {}),
            **({"sites": [c.to_json() for c in self.sites]} if self.sites else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        try:
            return cls(
                test=text("test", data["test"]),
                variant=text("variant", data["variant"]),
                metric=data["metric"],
                baseline=data.get("baseline"),
                current=data.get("current"),
                change_pct=data.get("change_pct"),
                p_value=data.get("p_value"),
                cohens_d=data.get("cohens_d"),
                verdict=data["verdict"],
                min_detectable_pct=finite_or_none(
                    "min_detectable_pct", data.get("min_detectable_pct")
                ),
                gating=flag("gating", data.get("gating", True)),
                reasons=_reasons(data),
                scope=data.get("scope", "metric"),
                trend=tuple((str(c), float(v)) for c, v in data.get("trend") or ()),
                baseline_ci=_pair(data.get("baseline_ci")),
                current_ci=_pair(data.get("current_ci")),
                change_ci=_pair(data.get("change_ci")),
                confirm_change_pct=numbers("confirm_change_pct", data.get("confirm_change_pct")),
                why=tuple(_why_row(row) for row in data.get("why") or ()),
                confirmation=None
                if data.get("confirmation") is None
                else Confirmation.from_json(data["confirmation"]),
                accepted=None
                if data.get("accepted") is None
                else Accepted.from_json(data["accepted"]),
                sites=changes_from_json(data.get("sites")),
            )
        except KeyError as exc:
            raise RecordError(f"a comparison lacks the key {exc.args[0]!r}") from exc


def _reasons(data: Mapping[str, Any]) -> tuple[Reason, ...]:
    """The comparison's reasons (its note is their words, never read back)."""
    raw = data.get("reasons") or []
    note = data.get("note")
    if note is not None and not isinstance(note, str):  # written for people: text, or absent
        raise RecordError(f"a comparison's note is text, got {note!r}")
    if not isinstance(raw, list):
        raise RecordError(f"a comparison's reasons are a list, got {raw!r}")
    return tuple(Reason.from_json(r) for r in raw)


def _why_row(row: Any) -> tuple[str, float | None, float | None]:
    if not isinstance(row, list | tuple) or len(row) != 3:
        raise RecordError(f"a comparison's why rows are [operator, base, head], got {row!r}")
    op, base, head = row
    return (
        str(op),
        finite_or_none("why", base if base is None else float(base)),
        finite_or_none("why", head if head is None else float(head)),
    )


def _pair(value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        raise RecordError(f"an interval must be [low, high], got {value!r}")
    return (value[0], value[1])
