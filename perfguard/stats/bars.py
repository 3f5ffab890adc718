"""A pull request does not loosen its own bar.

The thresholds a run is judged by come from its own tree (markers, ini, options), so a pull
request that writes `@pytest.mark.perfguard(ab_min_change_pct=100000)` beside its slowdown
would pass it. A rule the head loosens against the base commit's (a higher minimum change or
tolerance, a lower alpha, a gate switched off) is judged by the base's value instead, and the
run records each such rule (`settings.loosened`), which the report names: a change that is
slower on purpose belongs in the accept file, which is reviewed, bounded and expires.
A rule made stricter applies at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from perfguard.stats.thresholds import Thresholds

LOWER_IS_LOOSER = frozenset({"alpha", "gate_p99", "gate_ops"})
"""Rules that a smaller value loosens (fewer verdicts); for every other rule a larger one
does (a larger minimum change, tolerance or ratio)."""
RULES = (
    "alpha",
    "min_change_pct",
    "ab_min_change_pct",
    "gate_p99",
    "gate_ops",
    "instructions_pct",
    "memory_tolerance_pct",
    "compile_ratio",
)
RUN = "*"  # a loosened rule of the whole run (ini or command line), not of one test


@dataclass(frozen=True)
class Loosened:
    """A rule the head loosened: the test ("*": the whole run), the rule, both values."""

    test: str
    rule: str
    head: float | bool
    base: float | bool

    def to_json(self) -> dict[str, Any]:
        return {"test": self.test, "rule": self.rule, "head": self.head, "base": self.base}


def looser(rule: str, head: float | bool, base: float | bool) -> bool:
    return bool(head < base) if rule in LOWER_IS_LOOSER else bool(head > base)


def guard(head: Thresholds, base: Thresholds | None) -> tuple[Thresholds, tuple[Loosened, ...]]:
    """`head` with every rule it loosens against `base` (the base commit's thresholds) put
    back to the base's, for the run and for each test; and what was put back. No base: the
    head's stand."""
    if base is None:
        return head, ()
    found: list[Loosened] = []
    run_level: dict[str, Any] = {}
    for rule in RULES:
        h, b = getattr(head, rule), getattr(base, rule)
        if looser(rule, h, b):
            run_level[rule] = b
            found.append(Loosened(RUN, rule, h, b))
    guarded = replace(head, **run_level)
    per_test: dict[str, dict[str, Any]] = {t: dict(v) for t, v in head.per_test.items()}
    for test in sorted({*head.per_test, *base.per_test}):
        mine, theirs = guarded.for_test(test), base.for_test(test)
        for rule in RULES:
            h, b = getattr(mine, rule), getattr(theirs, rule)
            if looser(rule, h, b):  # its marker loosened it, or dropped a stricter one
                per_test.setdefault(test, {})[rule] = b
                found.append(Loosened(test, rule, h, b))
    return replace(guarded, per_test=per_test), tuple(found)


def loosened_json(found: Sequence[Loosened]) -> list[dict[str, Any]]:
    return [f.to_json() for f in found]


def loosened_of(settings: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """What a run's settings say was loosened (for the report): only entries of known rules
    with plain values, so that nothing from a file reaches the report unescaped."""
    value = settings.get("loosened") or []
    if not isinstance(value, list):
        return []
    return [
        v
        for v in value
        if isinstance(v, Mapping)
        and v.get("rule") in RULES
        and isinstance(v.get("test"), str)
        and all(isinstance(v.get(k), int | float) for k in ("head", "base"))
    ]
