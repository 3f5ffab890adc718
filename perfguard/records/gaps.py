"""What a run was asked to measure and did not: a run with any gap is incomplete.

A required check that passes a run which measured nothing, or half of the suite, is worse
than no check: so a session records each gap as it happens (a module that did not import,
an interrupt, an item past its time limit, an item that ended without a result, the base
tree's own failure in A/B), the report's first line says so, and `merge` and
`report --exit-code` fail on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfguard.records.base import RecordError, text

GAP_KINDS = (
    "collection_error",
    "interrupted",
    "timeout",
    "not_measured",
    "base_failed",
    "deleted",
)
"""- collection_error: a test module did not import or collect (its items never ran);
- interrupted: the session was stopped (Ctrl-C, SIGINT or SIGTERM, as a cancelled job);
- timeout: an item ran past `--perfguard-timeout` and was ended;
- not_measured: a perf item ended without a result (it failed before measuring, never
  called perfguard.run, or was not reached);
- base_failed: in same-job A/B, the base tree's side failed as a whole (its worktree, its
  collection, its worker);
- deleted: perf tests the base has and this tree does not (deleted or renamed): no longer
  measured, so no longer judged, which a reviewer must see and a maintainer pass on purpose."""

SHOWN_ITEMS = 10  # items a gap's line names before "and N more"


@dataclass(frozen=True, kw_only=True)
class Gap:
    """One thing the run did not measure: its kind, one line of detail, the items it hit."""

    kind: str
    detail: str
    items: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in GAP_KINDS:
            raise RecordError(f"incomplete[].kind must be one of {GAP_KINDS}, got {self.kind!r}")
        text("incomplete[].detail", self.detail)
        if not isinstance(self.items, Sequence) or isinstance(self.items, str):
            raise RecordError(f"incomplete[].items must be a list, got {self.items!r}")
        object.__setattr__(
            self, "items", tuple(text("incomplete[].items[]", i) for i in self.items)
        )

    def line(self) -> str:
        """The gap in one line, naming its first items."""
        names = ", ".join(self.items[:SHOWN_ITEMS])
        more = f" and {len(self.items) - SHOWN_ITEMS} more" if len(self.items) > SHOWN_ITEMS else ""
        return f"{self.detail}" + (f": {names}{more}" if names else "")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "items": list(self.items)}

    @classmethod
    def from_json(cls, data: Any) -> Gap:
        if not isinstance(data, Mapping):
            raise RecordError(f"incomplete[] must be an object, got {data!r}")
        try:
            return cls(kind=data["kind"], detail=data["detail"], items=data.get("items") or ())
        except KeyError as exc:
            raise RecordError(f"incomplete[] lacks the key {exc.args[0]!r}") from None


def summary(gaps: Sequence[Gap]) -> str:
    """The run's gaps in one line, for the report's first line and a command's exit."""
    return "; ".join(g.line() for g in gaps)


def deleted_gap(gone: Iterable[tuple[str, str]]) -> Gap:
    """The base's perf tests this tree does not have (deleted or renamed)."""
    items = tuple(sorted({f"{test} [{variant}]" for test, variant in gone}))
    return Gap(
        kind="deleted",
        detail=f"{len(items)} perf test(s) of the base commit are gone from this tree (deleted "
        "or renamed): no longer measured, so no longer judged",
        items=items,
    )
