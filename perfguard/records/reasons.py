"""Why a comparison reads as it does, typed: each reason is a kind and its figures.

Code and tests read the kind and the figures; the words come from the one table below
(`KINDS`), so a sentence is written once and never read back. A comparison's `note` is its
reasons rendered, joined by "; ", and results files keep both (`reasons` for programs,
`note` for people); the note is never read back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfguard.records.base import RecordError

Figure = float | int | str


@dataclass(frozen=True)
class Kind:
    template: str  # str.format words; the confirmation's are its record's
    types: Mapping[str, type] = field(default_factory=dict)  # each figure's type

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.types)


def _kind(template: str, **types: type) -> Kind:
    return Kind(template, types)


KINDS: dict[str, Kind] = {
    # latency tests (perfguard.stats.latency)
    "paired": _kind("paired tests (mean, trimmed mean) over {pairs} A/B block pairs", pairs=int),
    "paired_sequential": _kind(
        "paired tests (mean, trimmed mean) over {pairs} A/B block pairs, "
        "sequential (level {level:.3g} at that look)",
        pairs=int,
        level=float,
    ),
    "noise_floor": _kind("noise floor {pct:.1f}%", pct=float),
    "too_few_repeats": _kind(
        "too few repeats ({base} vs {head}; need {need})", base=int, head=int, need=int
    ),
    "within_noise": _kind("change is large but within the noise"),
    "adjusted": _kind("p adjusted (BH) {p:.3g}", p=float),
    # verdicts withheld (perfguard.stats.verdicts, perfguard.pipeline)
    "hardware_change": _kind("no verdict across a hardware change ({changes})", changes=str),
    # the environment is part of the change (perfguard.pipeline.compare)
    "packages_ran": _kind("packages this test ran changed: {changes}", changes=str),
    "compile_not_beside": _kind(
        "not gating: the base side compiled from main's artifacts, so its cold compile is "
        "its stored baseline's, measured in another job"
    ),
    "environment_step": _kind(
        "an environment step, not a code change: {changes} changed since the baseline",
        changes=str,
    ),
    "runner_health": _kind("runner health: {warnings}", warnings=str),
    # the stored baseline beside a paired verdict, as context (perfguard.pipeline)
    "stored_context": _kind(
        "context only: the stored baseline of {commit} reads {change:+.1f}% ({verdict} there, "
        "measured in another process; the verdict is the paired one)",
        commit=str,
        change=float,
        verdict=str,
    ),
    # accepted changes (perfguard.stats.accepts)
    "beyond_accepted": _kind("beyond the accepted {bound}", bound=str),
    # measured again (perfguard.confirm): the words are the comparison's `confirmation`'s
    "confirmation": Kind(""),
    # the item as a whole (perfguard.stats.verdicts)
    "no_baseline": _kind("no baseline"),
    "baseline_status": _kind("baseline was {status}", status=str),
    "baseline_error": _kind("the baseline could not measure it: {error}", error=str),
    "in_base_only": _kind("in the baseline, not in this run"),
    "skipped_here": _kind("skipped here: {error}", error=str),
    "failed": _kind("{error}", error=str),
    # memory, compile time, drift (perfguard.stats.rules)
    "memory_tolerance": _kind("tolerance {pct:g}%", pct=float),
    "process_rss": _kind("process peak RSS: reported, not gating"),
    "compile_ratio": _kind("ratio {ratio:g}x", ratio=float),
    "drift_within": _kind("within tolerance class {tolerance_class}", tolerance_class=str),
    "drift_outside": _kind(
        "outside its tolerance class {tolerance_class}: error {error:.3g} > allowed "
        "{allowed:.3g} against {reference}",
        tolerance_class=str,
        error=float,
        allowed=float,
        reference=str,
    ),
    "drift_grew": _kind("drift grew more than {growth:g}x over the baseline's", growth=float),
    "nondeterministic": _kind(
        "not judged: the model is not deterministic (two eager calls on the same inputs differ "
        "by {spread:.2g} of its output's RMS); seed its randomness (torch.manual_seed before "
        "each call, a fixed generator in the model) or make its eval mode deterministic",
        spread=float,
    ),
    # exact signals (perfguard.stats.exact)
    "exact_count": _kind("exact count"),
    "new_graph_breaks": _kind("new graph break: {breaks}", breaks=str),
    "new_recompiles": _kind("recompiled: {reasons}", reasons=str),
    "op_changes": _kind("{changes}", changes=str),
    "same_operators": _kind("same operators"),
    "flops": _kind("FLOPs of one call"),
    "flops_change": _kind("FLOPs of one call, {change:+.1f}%", change=float),
    "instructions": _kind(
        "instructions of {region} under callgrind, {change:+.2f}% (tolerance ±{tolerance:g}%)",
        region=str,
        change=float,
        tolerance=float,
    ),
    "leak": _kind(
        "each warm call leaves {bytes:,} bytes allocated: a leak (outputs kept alive, a cache "
        "that grows)",
        bytes=int,
    ),
    "no_leak": _kind("exact count: allocations minus frees of a warm call"),
    # words kept from a file older than typed reasons, where no kind renders them again
    "text": _kind("{text}", text=str),
}
"""Every kind of reason: its words, and its figures with their types."""


@dataclass(frozen=True)
class Reason:
    kind: str
    figures: tuple[tuple[str, Figure], ...] = ()

    def __post_init__(self) -> None:
        spec = KINDS.get(self.kind)
        if spec is None:
            raise RecordError(f"reason kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        given = dict(self.figures)
        if sorted(given) != sorted(spec.names):
            raise RecordError(
                f"a {self.kind} reason has the figures {sorted(spec.names)}, got {sorted(given)}"
            )
        checked = []
        for name in spec.names:
            value, want = given[name], spec.types[name]
            if want is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, want) or isinstance(value, bool):
                raise RecordError(f"a {self.kind} reason's {name} is a {want.__name__}: {value!r}")
            if isinstance(value, float) and not math.isfinite(value):  # printed as a figure
                raise RecordError(f"a {self.kind} reason's {name} is a finite number: {value!r}")
            checked.append((name, value))
        object.__setattr__(self, "figures", tuple(checked))

    def __getitem__(self, name: str) -> Figure:
        return dict(self.figures)[name]

    def text(self, confirmation: Callable[[], str] | None = None) -> str:
        """The words; a confirmation's come from its record (`confirmation`)."""
        if self.kind == "confirmation":
            return confirmation() if confirmation is not None else "measured again"
        return KINDS[self.kind].template.format(**dict(self.figures))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **dict(self.figures)}

    @classmethod
    def from_json(cls, data: Any) -> Reason:
        if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str):
            raise RecordError(f"a reason is an object with a kind, got {data!r}")
        return cls(data["kind"], tuple((k, v) for k, v in data.items() if k != "kind"))


def reason(kind: str, **figures: Figure) -> Reason:
    return Reason(kind, tuple(figures.items()))


def render(reasons: Sequence[Reason], confirmation: Callable[[], str] | None = None) -> str:
    return "; ".join(r.text(confirmation) for r in reasons)
