"""Verdicts per operator and kernel: where in the call a change is, when the whole call's
change is too small to call.

A change local to one kernel or one layer's operator is a small share of the call and a
large share of that place: +1% of a 20-layer model is +20% of one layer's matmul, far above
that matmul's own noise. Each result keeps its places' times, block by block
(`records.op_times.OpTimes`); here each place both sides kept is compared:

- paired, in same-job A/B, where both sides took the same number of profiled blocks in
  pairs: the log ratio of each pair, tested as the latency's pairs are (`paired_test`, the
  t-test and the trimmed-mean test); unpaired against a stored baseline: Welch on the logs;
- every place of every item tested is corrected together (Benjamini-Hochberg, run-wide),
  so a suite of many items and many places is not a lottery. The places that may be called
  (`MIN_SHARE_PCT` of the call or more) are one family, the smaller ones (which can only be
  reported as `minor`) another: twenty layers' small ops would otherwise raise the bar of the
  twenty matmuls that may be called, for rows that never gate;
- a change is called only past the place's bar (`op_min_change_pct`, 10% unless a test or
  the run sets it; `perfguard calibrate` measures what two processes of the same code read
  for each place and advises it per item) and only for a place that holds at least
  `MIN_SHARE_PCT` of the base's call; a significant change past the bar of a smaller place is
  `minor`: reported, never called.

Verdicts are reported; they gate only where the run or the test asks (`gate_kernels`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from perfguard.records import Comparison, VariantResult
from perfguard.records.op_times import OpChange, OpTimes
from perfguard.stats.significance import benjamini_hochberg, paired_test, welch_t_test
from perfguard.stats.thresholds import Thresholds

MIN_SHARE_PCT = 1.0  # of the base's call: a smaller place is reported, not called
MIN_BLOCKS = 4  # blocks a side needs for a place to be tested


@dataclass(frozen=True)
class _Tested:
    change: OpChange
    p: float


def _times(result: VariantResult | None) -> OpTimes | None:
    if result is None or result.status != "ok":
        return None
    return result.details.op_times


def _place(
    test: str,
    variant: str,
    place: str,
    base: OpTimes,
    head: OpTimes,
    paired: bool,
    bar_pct: float,
) -> _Tested | None:
    b, h = base.series(place), head.series(place)
    if b is None or h is None or min(len(b), len(h)) < MIN_BLOCKS:
        return None
    if min(*b, *h) <= 0:
        return None
    b_med, h_med = statistics.median(b), statistics.median(h)
    if paired:
        ratios = np.log(np.asarray(h)) - np.log(np.asarray(b))
        change = 100.0 * math.expm1(float(np.median(ratios)))
        p = paired_test(b, h)
    else:
        change = 100.0 * (h_med / b_med - 1.0)
        p = welch_t_test(np.log(b), np.log(h))[1]
    call = statistics.median(base.call_us) if base.call_us else 0.0
    share = 100.0 * b_med / call if call > 0 else 0.0
    op = OpChange(
        test=test,
        variant=variant,
        place=place,
        where=base.where.get(place) or head.where.get(place),
        clock=base.clock,
        baseline_us=b_med,
        current_us=h_med,
        change_pct=change,
        share_pct=share,
        p_value=p,
        adjusted_p=None,
        bar_pct=bar_pct,
        paired=paired,
        verdict="inconclusive",
    )
    return _Tested(op, p)


def _decide(op: OpChange, adjusted: float, alpha: float, gate: bool) -> OpChange:
    past_bar = abs(op.change_pct) >= op.bar_pct
    if adjusted <= alpha and past_bar:
        if op.share_pct < MIN_SHARE_PCT:
            verdict = "minor"
        else:
            verdict = "regression" if op.change_pct > 0 else "improvement"
    elif past_bar:
        verdict = "inconclusive"
    else:
        verdict = "unchanged"
    return replace(
        op,
        adjusted_p=adjusted,
        verdict=verdict,  # type: ignore[arg-type]
        gating=gate and verdict == "regression",
    )


def _corrected(tested: Sequence[_Tested]) -> Iterator[tuple[_Tested, float]]:
    """Each tested place with its adjusted p, corrected within its family: those that may
    be called, and the smaller ones."""
    for family in (
        [t for t in tested if t.change.share_pct >= MIN_SHARE_PCT],
        [t for t in tested if t.change.share_pct < MIN_SHARE_PCT],
    ):
        yield from zip(family, benjamini_hochberg([t.p for t in family]), strict=True)


def compare_ops(
    pairs: Iterable[tuple[VariantResult | None, VariantResult]],
    thresholds: Thresholds,
    *,
    paired: bool,
) -> tuple[OpChange, ...]:
    """Every place both sides of each (base, head) pair kept, compared and corrected
    together; `paired`: the sides' blocks were taken in pairs (same-job A/B). The changes
    that are not `unchanged`, the largest first within each item."""
    tested: list[_Tested] = []
    for base_result, head_result in pairs:
        base, head = _times(base_result), _times(head_result)
        if base is None or head is None or base.clock != head.clock:
            continue
        th = thresholds.for_test(head_result.test)
        in_pairs = paired and len(base.blocks) == len(head.blocks)
        for place in base.places:
            found = _place(
                head_result.test,
                head_result.variant,
                place,
                base,
                head,
                in_pairs,
                th.op_min_change_pct,
            )
            if found is not None:
                tested.append(found)
    out = []
    for t, adj in _corrected(tested):
        th = thresholds.for_test(t.change.test)
        decided = _decide(t.change, adj, th.alpha, th.gate_kernels)
        if decided.verdict != "unchanged":
            out.append(decided)
    out.sort(key=lambda c: (c.test, c.variant, -abs(c.change_pct) * c.share_pct))
    return tuple(out)


def tested_places(
    pairs: Iterable[tuple[VariantResult | None, VariantResult]],
) -> int:
    """How many places both sides kept (what the correction was over, at most)."""
    count = 0
    for base_result, head_result in pairs:
        base, head = _times(base_result), _times(head_result)
        if base is not None and head is not None and base.clock == head.clock:
            count += sum(1 for p in base.places if head.series(p) is not None)
    return count


def located(comparison: Comparison, ops: Sequence[OpChange]) -> tuple[OpChange, ...]:
    """The called places of `comparison`'s item that moved its way: where a change of the
    whole call is, when the whole call's own verdict could not say."""
    sign = 1 if (comparison.change_pct or 0.0) >= 0 else -1
    return tuple(
        op
        for op in ops
        if op.test == comparison.test
        and op.variant == comparison.variant
        and op.called
        and (op.change_pct > 0) == (sign > 0)
    )


def compare_results(
    base: Sequence[VariantResult],
    head: Sequence[VariantResult],
    thresholds: Thresholds,
    *,
    paired: bool,
) -> tuple[OpChange, ...]:
    """`compare_ops` over the results the two sides share, by test and variant."""
    by_key = {r.key: r for r in base}
    return compare_ops(((by_key.get(r.key), r) for r in head), thresholds, paired=paired)


def op_noise(
    base: OpTimes, head: OpTimes, rounds: int, thresholds: Thresholds
) -> dict[str, object] | None:
    """What two sides of the same code read for each place (`perfguard calibrate`): the
    blocks cut into `rounds` comparisons of their pairs, each place's change in each, the
    places called at the bar in force (false alarms: the code is the same), and the bar that
    would have called none of the places that may be called (1% of the call or more): the
    largest change seen, half again, rounded up, never under the default."""
    n = min(len(base.blocks), len(head.blocks)) // max(rounds, 1)
    if rounds < 1 or n < MIN_BLOCKS:
        return None
    places: dict[str, dict[str, object]] = {}
    called = 0
    for r in range(rounds):
        part = slice(r * n, (r + 1) * n)
        a = replace(base, call_us=base.call_us[part], blocks=base.blocks[part])
        b = replace(head, call_us=head.call_us[part], blocks=head.blocks[part])
        for place in a.places:
            found = _place("", "", place, a, b, True, thresholds.op_min_change_pct)
            if found is None:
                continue
            seen = places.setdefault(place, {"share_pct": found.change.share_pct, "changes": []})
            seen["changes"].append(round(found.change.change_pct, 2))  # type: ignore[attr-defined]
        tested = [
            t
            for p in a.places
            if (t := _place("", "", p, a, b, True, thresholds.op_min_change_pct)) is not None
        ]
        adjusted = benjamini_hochberg([t.p for t in tested])
        called += sum(
            _decide(t.change, adj, thresholds.alpha, False).called
            for t, adj in zip(tested, adjusted, strict=True)
        )
    large = [
        abs(c)
        for v in places.values()
        if float(v["share_pct"]) >= MIN_SHARE_PCT  # type: ignore[arg-type]
        for c in v["changes"]  # type: ignore[attr-defined]
    ]
    advised = max(thresholds.op_min_change_pct, math.ceil(1.5 * max(large, default=0.0)))
    return {
        "rounds": rounds,
        "blocks": n,
        "called": called,
        "largest_pct": round(max(large, default=0.0), 2),
        "advised_pct": advised,
        "places": places,
    }
