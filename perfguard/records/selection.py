"""What a partial run chose to measure: the record of a pull request's selection step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfguard.records.base import RecordError, finite_or_none, flag, text, texts

MAX_CHANGED = 200  # changed paths a record keeps (the count is kept whole)
SHOWN_METRICS = ("latency_p50_ms", "latency_p95_ms", "peak_memory_bytes", "compile_time_s")
"""The base's figures an unaffected item is listed with."""


@dataclass(frozen=True, kw_only=True)
class Unaffected:
    """A perf item the change cannot reach: not measured; the base's figures where its
    stored baseline has them."""

    test: str
    variant: str
    baseline: Mapping[str, float]  # metric -> the base commit's figure

    def to_json(self) -> dict[str, Any]:
        return {"test": self.test, "variant": self.variant, "baseline": dict(self.baseline)}

    @classmethod
    def from_json(cls, data: Any) -> Unaffected:
        if not isinstance(data, Mapping):
            raise RecordError(f"an unaffected item must be an object, got {data!r}")
        figures = data.get("baseline") or {}
        if not isinstance(figures, Mapping):
            raise RecordError(f"unaffected.baseline must be an object, got {figures!r}")
        kept = {str(k): finite_or_none(str(k), v) for k, v in figures.items()}
        return cls(
            test=text("unaffected.test", data.get("test")),
            variant=text("unaffected.variant", data.get("variant")),
            baseline={k: v for k, v in kept.items() if v is not None},
        )


@dataclass(frozen=True, kw_only=True)
class Selection:
    """A pull request's selection step: `partial` (only what the change can affect was
    measured) or a full run, with why; the files that changed against `base`, and the items
    left unmeasured."""

    partial: bool
    reason: str
    base: str | None = None
    changed: tuple[str, ...] = ()
    changed_count: int = 0
    unaffected: tuple[Unaffected, ...] = ()
    # a partial run's measured tests: what of the change reached each (a changed function,
    # a file it read, no record of it)
    reached: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reached", dict(self.reached))

    def to_json(self) -> dict[str, Any]:
        return {
            "partial": self.partial,
            "reason": self.reason,
            "base": self.base,
            "changed": list(self.changed[:MAX_CHANGED]),
            "changed_count": self.changed_count,
            "unaffected": [u.to_json() for u in self.unaffected],
            "reached": dict(sorted(self.reached.items())),
        }

    @classmethod
    def from_json(cls, data: Any) -> Selection:
        if not isinstance(data, Mapping):
            raise RecordError(f"selection must be an object, got {data!r}")
        base = data.get("base")
        return cls(
            partial=flag("selection.partial", data.get("partial")),
            reason=text("selection.reason", data.get("reason") or ""),
            base=None if base is None else text("selection.base", base),
            changed=texts("selection.changed", data.get("changed")),
            changed_count=int(data.get("changed_count") or 0),
            unaffected=tuple(Unaffected.from_json(u) for u in data.get("unaffected") or ()),
            reached=_reached(data.get("reached")),
        )


def _reached(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RecordError(f"selection.reached must be an object, got {value!r}")
    return {
        text("selection.reached key", k): text(f"selection.reached[{k!r}]", v)
        for k, v in value.items()
    }
