"""What a result keeps of its operators' and kernels' times, block by block, and what comparing
them said.

`OpTimes`: the profiled blocks of one result, taken apart from its timed blocks (a profiled
call is slower than a timed one; the latency figures never see them). Each block is a few
calls; for each place in the call (an operator's or a kernel's name and its occurrence in the
call, `aten::addmm #7`) its time per call in microseconds (the median over the block's
calls), and the call's own time, which an op's share is read against. A block keeps the places
that hold at least `KEEP_SHARE` of the call, at most `KEEP_MOST`: its size is bounded whatever
the model.

`OpChange`: one place compared, base against head, with its verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from perfguard.records.base import RecordError, finite_or_none, flag, text

KEEP_SHARE = 0.002  # of the call: places below it are not kept
KEEP_MOST = 64  # places kept per block, the largest first

OpVerdict = Literal["regression", "improvement", "unchanged", "inconclusive", "minor"]
OP_VERDICTS: tuple[OpVerdict, ...] = (
    "regression",
    "improvement",
    "unchanged",
    "inconclusive",
    "minor",  # a significant change past the bar of a place too small a share of the call
)
OpClock = Literal["host", "device"]


def _per_block(name: str, value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise RecordError(f"{name} must be an object of numbers, got {value!r}")
    out: dict[str, float] = {}
    for key, us in value.items():
        number = finite_or_none(f"{name}[{key!r}]", us)
        if number is None or number < 0:
            raise RecordError(f"{name}[{key!r}] must be a number of microseconds, got {us!r}")
        out[str(key)] = number
    return out


@dataclass(frozen=True, kw_only=True)
class OpTimes:
    """The profiled blocks of one result (see the module docstring)."""

    clock: OpClock  # "host": operators' self time (CPU); "device": kernels' (CUDA)
    calls: int  # calls per block
    call_us: tuple[float, ...]  # each block's time of one call
    blocks: tuple[Mapping[str, float], ...]  # each block's places, µs per call
    where: Mapping[str, str] = field(default_factory=dict)  # place -> the module it ran in

    def __post_init__(self) -> None:
        if self.clock not in ("host", "device"):
            raise RecordError(f"op_times.clock must be host or device, got {self.clock!r}")
        if not isinstance(self.calls, int) or self.calls < 1:
            raise RecordError(f"op_times.calls must be a whole number >= 1, got {self.calls!r}")
        if len(self.call_us) != len(self.blocks):
            raise RecordError("op_times: one call time per block")
        object.__setattr__(
            self,
            "call_us",
            tuple(_per_block("op_times.call_us", {"call": v})["call"] for v in self.call_us),
        )
        object.__setattr__(
            self, "blocks", tuple(_per_block("op_times.blocks", b) for b in self.blocks)
        )
        if not isinstance(self.where, Mapping):
            raise RecordError(f"op_times.where must be an object, got {self.where!r}")
        object.__setattr__(self, "where", {str(k): str(v) for k, v in self.where.items()})

    def series(self, place: str) -> tuple[float, ...] | None:
        """The place's time per call in each block; None when a block lacks it (it fell
        under what a block keeps there)."""
        values = [block.get(place) for block in self.blocks]
        return None if any(v is None for v in values) else tuple(v for v in values if v is not None)

    @property
    def places(self) -> tuple[str, ...]:
        """Every place a block kept, the largest (in the first block) first."""
        seen: dict[str, float] = {}
        for block in self.blocks:
            for place, us in block.items():
                seen[place] = max(seen.get(place, 0.0), us)
        return tuple(sorted(seen, key=lambda p: (-seen[p], p)))

    def to_json(self) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "calls": self.calls,
            "call_us": [round(v, 3) for v in self.call_us],
            "blocks": [{k: round(v, 3) for k, v in b.items()} for b in self.blocks],
            "where": dict(self.where),
        }

    @classmethod
    def from_json(cls, data: Any) -> OpTimes:
        if not isinstance(data, Mapping):
            raise RecordError(f"op_times must be an object, got {data!r}")
        blocks, calls = data.get("blocks"), data.get("call_us")
        if not isinstance(blocks, list) or not isinstance(calls, list):
            raise RecordError("op_times must hold lists `blocks` and `call_us`")
        try:
            return cls(
                clock=data["clock"],
                calls=data["calls"],
                call_us=tuple(calls),
                blocks=tuple(blocks),
                where=data.get("where") or {},
            )
        except KeyError as exc:
            raise RecordError(f"op_times lacks the key {exc.args[0]!r}") from exc


def kept(places: Mapping[str, float], call_us: float) -> dict[str, float]:
    """What a block keeps of its places (see the module docstring)."""
    floor = KEEP_SHARE * call_us
    largest = sorted(places.items(), key=lambda kv: (-kv[1], kv[0]))[:KEEP_MOST]
    return {place: us for place, us in largest if us >= floor and us > 0}


@dataclass(frozen=True, kw_only=True)
class OpChange:
    """One place of one test and variant, base against head (µs per call, the medians of the
    blocks), with its verdict. `share_pct`: the place's share of the base's call; `bar_pct`:
    the smallest change it may be called at; `p_value` as tested, `adjusted_p` after the
    run-wide correction over every place of every item."""

    test: str
    variant: str
    place: str  # "aten::addmm #7": the name, and its occurrence in the call
    where: str | None  # the module it ran in, where known
    clock: OpClock
    baseline_us: float
    current_us: float
    change_pct: float
    share_pct: float
    p_value: float | None
    adjusted_p: float | None
    bar_pct: float
    paired: bool
    verdict: OpVerdict
    gating: bool = False

    def __post_init__(self) -> None:
        if self.verdict not in OP_VERDICTS:
            raise RecordError(f"op verdict must be one of {OP_VERDICTS}, got {self.verdict!r}")
        for name in ("p_value", "adjusted_p"):
            object.__setattr__(self, name, finite_or_none(name, getattr(self, name)))

    @property
    def name(self) -> str:
        """The operator's or kernel's name, without its occurrence."""
        return self.place.rsplit(" #", 1)[0]

    @property
    def called(self) -> bool:
        return self.verdict in ("regression", "improvement")

    def label(self) -> str:
        """How the report names it: "`aten::addmm` in `layers.6.fc`" (or its occurrence in
        the call where the module is not known)."""
        name = self.name.replace("|", "\\|").replace("`", "'")
        if self.where:
            return f"`{name}` in `{self.where.replace('|', '/')}`"
        number = self.place.rsplit(" #", 1)[1] if " #" in self.place else None
        return f"`{name}` (#{number} in the call)" if number else f"`{name}`"

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "variant": self.variant,
            "place": self.place,
            "where": self.where,
            "clock": self.clock,
            "baseline_us": round(self.baseline_us, 3),
            "current_us": round(self.current_us, 3),
            "change_pct": round(self.change_pct, 3),
            "share_pct": round(self.share_pct, 3),
            "p_value": self.p_value,
            "adjusted_p": self.adjusted_p,
            "bar_pct": self.bar_pct,
            "paired": self.paired,
            "verdict": self.verdict,
            "gating": self.gating,
        }

    @classmethod
    def from_json(cls, data: Any) -> OpChange:
        if not isinstance(data, Mapping):
            raise RecordError(f"an op comparison must be an object, got {data!r}")
        try:
            where = data.get("where")
            return cls(
                test=text("op.test", data["test"]),
                variant=text("op.variant", data["variant"]),
                place=text("op.place", data["place"]),
                where=None if where is None else text("op.where", where),
                clock=data["clock"],
                baseline_us=_number("op.baseline_us", data["baseline_us"]),
                current_us=_number("op.current_us", data["current_us"]),
                change_pct=_number("op.change_pct", data["change_pct"]),
                share_pct=_number("op.share_pct", data["share_pct"]),
                p_value=data.get("p_value"),
                adjusted_p=data.get("adjusted_p"),
                bar_pct=_number("op.bar_pct", data["bar_pct"]),
                paired=flag("op.paired", data.get("paired", False)),
                verdict=data["verdict"],
                gating=flag("op.gating", data.get("gating", False)),
            )
        except KeyError as exc:
            raise RecordError(f"an op comparison lacks the key {exc.args[0]!r}") from exc


def _number(name: str, value: Any) -> float:
    number = finite_or_none(name, value)
    if number is None:
        raise RecordError(f"{name} must be a number, got {value!r}")
    return number


def changes_from_json(data: Any) -> tuple[OpChange, ...]:
    if data is None:
        return ()
    if not isinstance(data, Sequence) or isinstance(data, str):
        raise RecordError(f"op_comparisons must be a list, got {data!r}")
    return tuple(OpChange.from_json(c) for c in data)
