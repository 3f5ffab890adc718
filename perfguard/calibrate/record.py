"""What a calibration measured: for each perf item, its rounds, each a comparison of the tree
with itself as a pull request's A/B takes it (pairs of blocks until the sequential design
decides), some with this side's calls made slower by a known share (a canary), each with the
confirmation rounds it was given.

The driving pytest session writes it (`pytest_plugin/ab/calibrating.py`); `perfguard
calibrate` reads it and judges it (`calibrate.analysis`), without torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from perfguard.errors import PerfguardError

VERSION = 1

Blocks = tuple[tuple[float, ...], ...]


class CalibrationError(PerfguardError, ValueError):
    """A calibration record that does not read (another version, a cut file)."""


@dataclass(frozen=True)
class Comparison:
    """One comparison of the tree with itself: each side's blocks (in pair order), how the
    pairs were taken (`Pairing.to_json`), and what it cost."""

    a: Blocks
    b: Blocks
    pairing: Mapping[str, Any]
    wall_s: float  # from the first block asked to the last received
    device_ms: float  # the timed calls of both sides, summed
    pair: int = 0  # which pair of workers took it (`merged` numbers them)

    def to_json(self) -> dict[str, Any]:
        return {
            "a": [list(b) for b in self.a],
            "b": [list(b) for b in self.b],
            "pairing": dict(self.pairing),
            "wall_s": self.wall_s,
            "device_ms": self.device_ms,
            "pair": self.pair,
        }

    def shifted(self, factor: float) -> Comparison:
        """This comparison with this tree's side's times multiplied by `factor`: taken on a
        pair of workers whose offset differs by that much."""
        return replace(self, b=tuple(tuple(t * factor for t in block) for block in self.b))

    @classmethod
    def from_json(cls, data: Any) -> Comparison:
        found = _object("comparison", data)
        try:
            return cls(
                a=_blocks(found["a"]),
                b=_blocks(found["b"]),
                pairing=_object("pairing", found.get("pairing") or {}),
                wall_s=float(found.get("wall_s", 0.0)),
                device_ms=float(found.get("device_ms", 0.0)),
                pair=int(found.get("pair", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"a comparison does not read: {exc}") from None


@dataclass(frozen=True)
class Round:
    """A round: `slower_pct` 0 for identical sides, else the canary's share; its comparison
    and the confirmation rounds it was given (when it looked flagged before the run-wide
    correction, as the pull request's check re-measures a flag)."""

    slower_pct: float
    slower_ms: float  # the canary's delay per call (0: none)
    main: Comparison
    confirmations: tuple[Comparison, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "slower_pct": self.slower_pct,
            "slower_ms": self.slower_ms,
            "main": self.main.to_json(),
            "confirmations": [c.to_json() for c in self.confirmations],
        }

    @classmethod
    def from_json(cls, data: Any) -> Round:
        found = _object("round", data)
        try:
            slower_pct = float(found.get("slower_pct", 0.0))
            slower_ms = float(found.get("slower_ms", 0.0))
        except (TypeError, ValueError) as exc:
            raise CalibrationError(f"a round does not read: {exc}") from None
        if not (0.0 <= slower_pct <= 100.0 and math.isfinite(slower_ms) and slower_ms >= 0):
            raise CalibrationError(
                f"a round's canary is out of bounds: {slower_pct!r} {slower_ms!r}"
            )
        again = found.get("confirmations", [])
        if not isinstance(again, list):
            raise CalibrationError(f"a round's confirmations are a list, got {again!r}")
        return cls(
            slower_pct=slower_pct,
            slower_ms=slower_ms,
            main=Comparison.from_json(found.get("main")),
            confirmations=tuple(Comparison.from_json(c) for c in again),
        )


@dataclass(frozen=True)
class Item:
    """One perf item's calibration: its rounds in the order they ran, or why it has none."""

    test: str
    variant: str
    rounds: tuple[Round, ...] = ()
    call_ms: float | None = None  # a call's time in the timed blocks: what a canary is a share of
    delay: str = "host"  # where the canary acted: "host" or "device" (CUDA)
    error: str | None = None
    # what the two sides read for each operator or kernel (`stats.op_verdicts.op_noise`)
    ops: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "variant": self.variant,
            "call_ms": self.call_ms,
            "delay": self.delay,
            "error": self.error,
            "rounds": [r.to_json() for r in self.rounds],
            **({"ops": dict(self.ops)} if self.ops is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Any) -> Item:
        found = _object("item", data)
        try:
            test, variant, error = found["test"], found["variant"], found.get("error")
            delay = found.get("delay", "host")
            rounds = found.get("rounds", [])
            ops = found.get("ops")
            call_ms = None if found.get("call_ms") is None else float(found["call_ms"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"an item does not read: {exc}") from None
        if not isinstance(test, str) or not isinstance(variant, str) or not test or not variant:
            raise CalibrationError(
                f"an item's test and variant are names, got {test!r} {variant!r}"
            )
        if error is not None and not isinstance(error, str):
            raise CalibrationError(f"an item's error is text, got {error!r}")
        if delay not in ("host", "device"):
            raise CalibrationError(f"an item's delay is host or device, got {delay!r}")
        if not isinstance(rounds, list):
            raise CalibrationError(f"an item's rounds are a list, got {rounds!r}")
        if call_ms is not None and not (math.isfinite(call_ms) and call_ms > 0):
            raise CalibrationError(f"an item's call_ms is a time, got {call_ms!r}")
        if ops is not None and not isinstance(ops, Mapping):
            raise CalibrationError(f"an item's ops are an object, got {ops!r}")
        return cls(
            test=test,
            variant=variant,
            rounds=tuple(Round.from_json(r) for r in rounds),
            call_ms=call_ms,
            delay=delay,
            error=error,
            ops=ops,
        )


@dataclass(frozen=True)
class Calibration:
    """A calibration run: what it was asked for, the rules it judged by, its items."""

    rounds: int  # identical comparisons per item
    canary: tuple[float, ...]  # the canaries' shares, in percent
    canary_rounds: int  # comparisons per canary and item
    confirm: int  # confirmation rounds a flag is given (the session's --perfguard-confirm)
    thresholds: Mapping[str, Any]  # `Thresholds.to_json` of the session
    items: tuple[Item, ...] = ()
    device: str = "cpu"
    launches: Mapping[str, int] = field(default_factory=dict)  # worker starts, per side
    wall_s: float = 0.0  # the whole calibration, workers' start included
    pairs: int = 1  # pairs of workers the rounds were shared among

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "rounds": self.rounds,
            "canary": list(self.canary),
            "canary_rounds": self.canary_rounds,
            "confirm": self.confirm,
            "thresholds": dict(self.thresholds),
            "device": self.device,
            "launches": dict(self.launches),
            "wall_s": self.wall_s,
            "pairs": self.pairs,
            "items": [i.to_json() for i in self.items],
        }

    @classmethod
    def from_json(cls, data: Any) -> Calibration:
        found = _object("calibration", data)
        if found.get("version") != VERSION:
            raise CalibrationError(
                f"calibration record version {found.get('version')!r}, this perfguard reads "
                f"{VERSION}"
            )
        try:
            return cls(
                rounds=int(found["rounds"]),
                canary=tuple(float(c) for c in found["canary"]),
                canary_rounds=int(found["canary_rounds"]),
                confirm=int(found["confirm"]),
                thresholds=_object("thresholds", found.get("thresholds") or {}),
                items=tuple(Item.from_json(i) for i in found.get("items", [])),
                device=str(found.get("device", "cpu")),
                launches={str(k): int(v) for k, v in (found.get("launches") or {}).items()},
                wall_s=float(found.get("wall_s", 0.0)),
                pairs=int(found.get("pairs", 1)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"the calibration record does not read: {exc}") from None


def merged(parts: Sequence[Calibration]) -> Calibration:
    """Calibrations of the same items by several pairs of workers as one: each item's rounds
    one after the other (the k-th round of a kind is then the k-th over all pairs), the
    rounds asked for and the workers' starts summed. With more than one pair, a round's
    confirmation is another pair's round of the same kind, as a pull request's flag is
    measured again by a fresh pair of processes: re-measured on its own pair, a round would
    carry that pair's offset into its confirmation."""
    if not parts:
        raise CalibrationError("no calibration to merge")
    first = parts[0]
    parts = [_numbered(part, index) for index, part in enumerate(parts)]
    if len(parts) > 1:
        parts = [_confirmed_elsewhere(parts, index) for index in range(len(parts))]
    items: dict[tuple[str, str], Item] = {}
    for part in parts:
        for item in part.items:
            key = (item.test, item.variant)
            had = items.get(key)
            if had is None:
                items[key] = item
                continue
            items[key] = replace(
                had,
                rounds=(*had.rounds, *item.rounds),
                call_ms=had.call_ms if had.call_ms is not None else item.call_ms,
                error=had.error if not item.rounds else (item.error if not had.rounds else None),
            )
    launches: dict[str, int] = {}
    for part in parts:
        for side, count in part.launches.items():
            launches[side] = launches.get(side, 0) + count
    return replace(
        first,
        rounds=sum(p.rounds for p in parts),
        canary_rounds=sum(p.canary_rounds for p in parts),
        items=tuple(items.values()),
        launches=launches,
        wall_s=sum(p.wall_s for p in parts),
        pairs=sum(p.pairs for p in parts),
    )


def _numbered(part: Calibration, pair: int) -> Calibration:
    """`part` with each of its comparisons saying it was taken by pair `pair`."""

    def mark(r: Round) -> Round:
        return replace(
            r,
            main=replace(r.main, pair=pair),
            confirmations=tuple(replace(c, pair=pair) for c in r.confirmations),
        )

    items = tuple(replace(i, rounds=tuple(mark(r) for r in i.rounds)) for i in part.items)
    return replace(part, items=items)


def _confirmed_elsewhere(parts: Sequence[Calibration], index: int) -> Calibration:
    """Part `index` with each round's confirmations taken from the next parts' rounds of the
    same item and kind (its own kept where no other pair has one)."""
    others = [parts[(index + step) % len(parts)] for step in range(1, len(parts))]
    items = []
    for item in parts[index].items:
        alike = [
            _by_kind(o)
            for other in others
            for o in other.items
            if (o.test, o.variant) == (item.test, item.variant)
        ]
        seen: dict[float, int] = {}
        rounds = []
        for r in item.rounds:
            position = seen.get(r.slower_pct, 0)
            seen[r.slower_pct] = position + 1
            found = [
                kinds[r.slower_pct][position % len(kinds[r.slower_pct])]
                for kinds in alike
                if kinds.get(r.slower_pct)
            ][: max(parts[index].confirm, 1)]
            rounds.append(replace(r, confirmations=tuple(found)) if found else r)
        items.append(replace(item, rounds=tuple(rounds)))
    return replace(parts[index], items=tuple(items))


def _by_kind(item: Item) -> dict[float, list[Comparison]]:
    """An item's main comparisons by kind (0 identical, else the canary's share), in order."""
    kinds: dict[float, list[Comparison]] = {}
    for r in item.rounds:
        kinds.setdefault(r.slower_pct, []).append(r.main)
    return kinds


def schedule(rounds: int, canary: Sequence[float], canary_rounds: int, seed: int) -> list[float]:
    """The order of an item's rounds (0: identical sides, else a canary's share): the first
    identical, the rest shuffled alike for every item, so that drift during the run hits
    identical and canary rounds alike and round k of a kind is the same place for each."""
    import random

    kinds = [0.0] * max(rounds - 1, 0) + [float(c) for c in canary for _ in range(canary_rounds)]
    random.Random(f"calibrate:{seed}").shuffle(kinds)
    return ([0.0] if rounds else []) + kinds


def _object(name: str, data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise CalibrationError(f"{name} must be an object, got {type(data).__name__}")
    return data


def _blocks(value: Any) -> Blocks:
    return tuple(tuple(float(t) for t in block) for block in value)
