"""What a calibration says, per item and in all: the false alarms and canaries these pairs
of workers saw, the shares predicted for a fresh pair, the spread, the bar to advise and the
cost (`calibrate.analysis` judges the rounds into them; `calibrate.render` writes them)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfguard.calibrate.record import Calibration

RELIABLE = 0.9
"""A canary is called reliably when at least this share of its rounds were caught."""
ADVISE_SDS = 3.0
"""The bar advised for an item: this many standard deviations of the paired change a fresh
pair of workers shows for identical code, rounded up to half a percent, and at least 1%."""


@dataclass(frozen=True)
class Offsets:
    """How an item's identical rounds spread within and between pairs of workers (standard
    deviations of the paired change, in percent), and each pair's own mean."""

    within_pct: float
    between_pct: float
    means: Mapping[int, float]


@dataclass(frozen=True)
class Canary:
    """One canary level on one item: caught in `caught` of `rounds`; `measured_pct` the
    median of the paired change the rounds estimated (what the delay amounted to); `fresh`
    the share a fresh pair of workers is predicted to catch (None: one pair, not known)."""

    pct: float
    rounds: int
    caught: int
    measured_pct: float | None
    fresh: float | None = None

    @property
    def share(self) -> float:
        """The share a pull request's check is predicted to catch: on a fresh pair where the
        spread between pairs is known, else as these pairs caught it."""
        if self.fresh is not None:
            return self.fresh
        return self.caught / self.rounds if self.rounds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "pct": self.pct,
            "rounds": self.rounds,
            "caught": self.caught,
            "measured_pct": self.measured_pct,
            "predicted": self.share if self.rounds else None,
        }


@dataclass(frozen=True)
class ItemReport:
    """What the calibration says of one item."""

    test: str
    variant: str
    bar_pct: float  # the item's bar as configured (`ab_min_change_pct`)
    error: str | None = None
    call_ms: float | None = None
    delay: str = "host"
    identical: int = 0  # identical rounds judged
    false_alarms: int = 0  # of them, flagged after confirmation
    changes_pct: tuple[float, ...] = ()  # the identical rounds' paired p50 change
    canaries: tuple[Canary, ...] = ()
    device_s: float = 0.0  # per comparison, confirmations included
    wall_s: float = 0.0
    offsets: Offsets | None = None  # the spread within and between pairs (None: one pair)
    fresh_false_alarms: float | None = None  # the share predicted on a fresh pair

    @property
    def noise_pct(self) -> float | None:
        """The spread of the paired change a fresh pair shows for identical code (standard
        deviation): within a pair and between pairs together where several pairs measured,
        else over the identical rounds."""
        if self.offsets is not None:
            return math.hypot(self.offsets.within_pct, self.offsets.between_pct)
        return statistics.stdev(self.changes_pct) if len(self.changes_pct) > 1 else None

    @property
    def false_alarm_share(self) -> float:
        """The share of identical comparisons a pull request's check is predicted to flag."""
        if self.fresh_false_alarms is not None:
            return self.fresh_false_alarms
        return self.false_alarms / self.identical if self.identical else 0.0

    @property
    def reliable_pct(self) -> float | None:
        """The smallest canary caught reliably, every larger one too (None: none was)."""
        found = None
        for canary in sorted(self.canaries, key=lambda c: -c.pct):
            if canary.rounds == 0 or canary.share < RELIABLE:
                break
            found = canary.pct
        return found

    @property
    def advised_bar_pct(self) -> float | None:
        noise = self.noise_pct
        if noise is None:
            return None
        return max(1.0, math.ceil(ADVISE_SDS * noise * 2) / 2)

    @property
    def missed(self) -> tuple[float, ...]:
        """Canaries at or above the item's bar that no round caught: the check cannot fire
        on this item here."""
        return tuple(
            c.pct for c in self.canaries if c.pct >= self.bar_pct and c.rounds and not c.caught
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "variant": self.variant,
            "error": self.error,
            "call_ms": self.call_ms,
            "delay": self.delay,
            "bar_pct": self.bar_pct,
            "identical": {
                "rounds": self.identical,
                "false_alarms": self.false_alarms,
                "predicted_false_alarms": self.false_alarm_share if self.identical else None,
                "noise_pct": self.noise_pct,
                "within_pair_pct": None if self.offsets is None else self.offsets.within_pct,
                "between_pairs_pct": None if self.offsets is None else self.offsets.between_pct,
                "changes_pct": list(self.changes_pct),
            },
            "canaries": [c.to_json() for c in self.canaries],
            "reliable_pct": self.reliable_pct,
            "advised_bar_pct": self.advised_bar_pct,
            "missed": list(self.missed),
            "cost": {"device_s": self.device_s, "wall_s": self.wall_s},
        }


@dataclass(frozen=True)
class Report:
    """The calibration, judged."""

    calibration: Calibration
    items: tuple[ItemReport, ...] = field(default_factory=tuple)

    @property
    def missed(self) -> list[tuple[ItemReport, float]]:
        return [(item, pct) for item in self.items for pct in item.missed]

    @property
    def false_alarm_rate(self) -> float | None:
        """The share of identical comparisons a pull request's check is predicted to flag
        (each item's rounds weighing as many as they are)."""
        rounds = sum(i.identical for i in self.items)
        flagged = sum(i.false_alarm_share * i.identical for i in self.items)
        return flagged / rounds if rounds else None

    def _at(self, pct: float) -> list[Canary]:
        """Every item's canary of `pct`."""
        return [c for i in self.items for c in i.canaries if c.pct == pct]

    def detection_rate(self, pct: float) -> float | None:
        """The share of comparisons slowed by `pct` the check is predicted to catch."""
        found = self._at(pct)
        rounds = sum(c.rounds for c in found)
        return sum(c.share * c.rounds for c in found) / rounds if rounds else None

    def seen(self) -> dict[str, Any]:
        """What these pairs of workers saw, before any fresh pair was drawn."""
        rounds = sum(i.identical for i in self.items)
        canaries = {}
        for pct in self.calibration.canary:
            found = self._at(pct)
            canaries[f"{pct:g}"] = [sum(c.caught for c in found), sum(c.rounds for c in found)]
        return {
            "false_alarms": [sum(i.false_alarms for i in self.items), rounds],
            "caught": canaries,
        }

    def to_json(self) -> dict[str, Any]:
        cal = self.calibration
        return {
            "rounds": cal.rounds,
            "canary": list(cal.canary),
            "canary_rounds": cal.canary_rounds,
            "confirm": cal.confirm,
            "device": cal.device,
            "launches": dict(cal.launches),
            "wall_s": cal.wall_s,
            "pairs": cal.pairs,
            "false_alarm_rate": self.false_alarm_rate,
            "detection_rate": {f"{p:g}": self.detection_rate(p) for p in cal.canary},
            "seen": self.seen(),
            "missed": [{"test": i.test, "variant": i.variant, "pct": p} for i, p in self.missed],
            "items": [i.to_json() for i in self.items],
        }
