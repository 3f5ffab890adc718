"""Why a comparison reads as it does, typed: each reason is a kind and its figures.

Code and tests read the kind and the figures; the words come from the one table below
(`KINDS`), so a sentence is written once and never read back. A comparison's `note` is its
reasons rendered, joined by "; ", and results files keep both (`reasons` for programs,
`note` for people and for readers of older files).

Files from before reasons were typed (schema 8 and older) kept the note alone: `parse_note`
reads it back once, when such a file is read, into the kinds below wherever a part renders
to the same words again, and into a `text` reason (the words kept as they were) wherever
it does not.
"""

from __future__ import annotations

import math
import re
import string
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


# --- reading an old note back ------------------------------------------------------------

_SEPARATOR = "; "


def _pattern(spec: Kind) -> re.Pattern[str]:
    """A kind's words with each figure a group, matched at a position and followed by the
    separator or the end."""
    out = []
    for literal, name, _, _ in string.Formatter().parse(spec.template):
        out.append(re.escape(literal))
        if name is not None:
            out.append(f"(?P<{name}>.+?)")
    return re.compile("".join(out) + f"(?={re.escape(_SEPARATOR)}|$)", re.DOTALL)


_PARSED = {
    kind: _pattern(spec)
    for kind, spec in KINDS.items()
    # words that begin with a figure, or that are a record's, could be anything: they are
    # told by where they stand (`LEADS`, an item's error, the confirmation), not by shape
    if spec.template and not spec.template.startswith("{")
}


def _read_figure(value: str, want: type) -> Figure:
    if want is int:
        return int(value.replace(",", ""))
    if want is float:
        return float(value)
    return value


def _match(note: str, at: int) -> tuple[Reason, int] | None:
    """The first kind whose words, read back, render to exactly the same words at `at`."""
    for kind, pattern in _PARSED.items():
        found = pattern.match(note, at)
        if found is None:
            continue
        spec = KINDS[kind]
        try:
            figures = {
                name: _read_figure(found.group(name), spec.types[name]) for name in spec.names
            }
            candidate = reason(kind, **figures)
        except (ValueError, RecordError):
            continue
        if candidate.text() == found.group(0):
            return candidate, found.end()
    return None


def parse_note(note: str, confirmation: str = "", whole: str = "") -> tuple[Reason, ...]:
    """An old note's reasons. `confirmation`: the words of the comparison's confirmation
    record, if it has one; `whole`: the kind whose words lead the note whatever they hold,
    told by the row they stand in (`LEADS`)."""
    if not note:
        return ()
    if whole == "failed":  # an item's error: nothing was ever added after it
        return (reason("failed", error=note),)
    if whole:
        # the shortest lead after which everything reads as known kinds (a list of graph
        # breaks or operators holds "; " itself)
        cuts = [m.start() for m in re.finditer(re.escape(_SEPARATOR), note)] + [len(note)]
        for cut in cuts:
            lead = LEADS[whole](note[:cut])
            if lead is None:
                continue
            rest = _parse(note[cut + len(_SEPARATOR) :], confirmation) if cut < len(note) else ()
            if all(r.kind != "text" for r in rest):
                return (lead, *rest)
    return _parse(note, confirmation)


def _breaks(words: str) -> Reason | None:
    prefix = "new graph break: "
    return (
        reason("new_graph_breaks", breaks=words[len(prefix) :])
        if words.startswith(prefix)
        else None
    )


def _ops(words: str) -> Reason | None:
    return None if words in ("", "same operators") else reason("op_changes", changes=words)


LEADS: dict[str, Callable[[str], Reason | None]] = {
    "new_graph_breaks": _breaks,  # a graph_breaks row
    "op_changes": _ops,  # an aten_ops row
}
"""The kinds whose words could hold anything, each read by the row it leads."""


def _parse(note: str, confirmation: str) -> tuple[Reason, ...]:
    out: list[Reason] = []
    at = 0
    while at <= len(note):
        if confirmation and note.startswith(confirmation, at):
            out.append(reason("confirmation"))
            at += len(confirmation)
        elif (found := _match(note, at)) is not None:
            out.append(found[0])
            at = found[1]
        else:
            end = note.find(_SEPARATOR, at)
            end = len(note) if end < 0 else end
            out.append(reason("text", text=note[at:end]))
            at = end
        if at >= len(note):
            break
        at += len(_SEPARATOR)
    return tuple(out)
