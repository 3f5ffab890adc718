"""What the rounds say about each verdict: it stands, it is withdrawn, or it stays as it was.

A process carries an offset of its own (a few % on a shared runner, for minutes at a time),
which a test on the repeats inside it cannot see. So each latency regression or improvement
against a stored baseline is measured again, once per round:
- a round beside the base commit (same-job A/B, block pairs interleaved) shows it again
  when its paired comparison gives the same verdict: a slow spell of the host hits both
  sides alike, and the stored baseline's own offset is out of it;
- a round of this tree alone, in a fresh process, shows it again when it moves the same way
  against the same baseline by at least the same practical bar (minimum change and noise
  floor).
Any round not showing it makes the verdict `inconclusive`. A round that could not be made,
or that failed its own checks (`perfguard.confirm.checks`), leaves the verdict as it was, and
says why.

The undecided items (`perfguard.confirm.targets.settle_targets`) are settled by the rounds
beside the base commit alone: a gating latency metric without a verdict takes the
regression or improvement that every such round gave, when it is the way the stored
comparison moved too (the opposite way: `inconclusive`).

Each comparison a round touched carries a `Confirmation`: the report's words come from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from perfguard.confirm.targets import Key, is_flagged_latency, moved_keys, undecided
from perfguard.records import (
    BESIDE,
    FRESH,
    Comparison,
    Confirmation,
    Run,
    VariantResult,
    Verdict,
    reason,
)
from perfguard.stats.verdicts import (
    NoiseFloor,
    Thresholds,
    change_pct,
    compare_runs,
    practical_bar,
)

Paired = Mapping[tuple[str, str, str], Comparison]
"""One round's paired comparisons, by (test, variant, metric)."""


@dataclass(frozen=True)
class Round:
    """One round as the judge reads it."""

    results: Sequence[VariantResult]  # this tree's side
    paired: Paired  # the items measured beside the base commit, judged paired
    spoilt: Mapping[Key, str]  # items whose round failed its own checks: why


def confirm_verdicts(
    comparisons: Sequence[Comparison],
    remeasures: Sequence[Sequence[VariantResult]],
    thresholds: Thresholds | None = None,
    noise: NoiseFloor | None = None,
    *,
    bases: Sequence[Sequence[VariantResult]] = (),
    disturbed: Sequence[Mapping[Key, str]] = (),
) -> tuple[Comparison, ...]:
    """The comparisons, judged again by the rounds (see the module docstring).

    `remeasures[k]`: this tree's results of round k; `bases[k]`: the base commit's side of
    round k when it was measured beside it (else empty); `disturbed[k]`: {item: why} for
    the items whose round k failed its own checks."""
    th_all = thresholds or Thresholds()
    floor = noise or {}
    settle = set(moved_keys(comparisons, th_all))
    rounds = [
        Round(
            results,
            _paired_round(results, bases[k] if k < len(bases) else (), th_all),
            disturbed[k] if k < len(disturbed) else {},
        )
        for k, results in enumerate(remeasures)
    ]
    out: list[Comparison] = []
    for c in comparisons:
        key = (c.test, c.variant)
        if key in settle and undecided(c) and rounds:
            out.append(_settle(c, rounds))
        elif is_flagged_latency(c) and rounds:
            bar = practical_bar(c.test, c.variant, c.metric, th_all.for_test(c.test), floor)
            out.append(_confirm(c, rounds, bar))
        else:
            out.append(c)
    return tuple(out)


def _confirm(c: Comparison, rounds: Sequence[Round], bar: float) -> Comparison:
    """A flagged comparison, re-measured in every round."""
    key = (c.test, c.variant)
    sign = 1.0 if c.verdict == "regression" else -1.0
    changes: list[float | None] = []
    missing = ""
    shown = True
    said: list[str] = []  # what the rounds beside the base commit decided instead
    where: set[str] = set()
    for r in rounds:
        again = next((x for x in r.results if x.key == key), None)
        beside = r.paired.get((c.test, c.variant, c.metric))
        if again is not None and key in r.spoilt:  # the round failed its own checks
            missing = r.spoilt[key]
            changes.append(None)
            continue
        gone = _base_side_gone(beside)
        if again is not None and again.status == "ok" and gone:
            again = VariantResult(test=c.test, variant=c.variant, status="error", error=gone)
        if again is None or again.status != "ok":
            missing = "not re-measured" if again is None else f"re-measure {again.status}"
            if again is not None and again.error:
                missing += f": {again.error}"
            changes.append(None)
            continue
        if beside is not None:
            where.add(BESIDE)
            changes.append(beside.change_pct)
            if beside.verdict != c.verdict:
                shown = False
                said.append(beside.verdict)
        else:
            where.add(FRESH)
            change = change_pct(c.baseline, getattr(again.metrics, c.metric))
            changes.append(change)
            shown = shown and change is not None and sign * change >= bar
    if missing:
        return _annotate(
            c, Confirmation(kind="unconfirmed", changes=tuple(changes), reason=missing)
        )
    if shown:
        return _annotate(c, Confirmation(kind="shown", where=tuple(where), changes=tuple(changes)))
    found = Confirmation(
        kind="not_shown",
        where=tuple(where),
        changes=tuple(changes),
        paired=tuple(said),
        bar_pct=bar if FRESH in where else None,
    )
    return replace(_annotate(c, found), verdict="inconclusive")


def _settle(c: Comparison, rounds: Sequence[Round]) -> Comparison:
    """`c`, undecided against the stored baseline, judged by the rounds that measured it
    beside the base commit (unchanged when a round did not)."""
    key = (c.test, c.variant)
    why = next((r.spoilt[key] for r in rounds if key in r.spoilt), "")
    if why:
        return _annotate(c, Confirmation(kind="not_settled", reason=why))
    besides = [r.paired.get((c.test, c.variant, c.metric)) for r in rounds]
    shown = [b for b in besides if b is not None]
    if len(shown) < len(besides):
        return c  # not measured beside the base commit: nothing settles it
    changes = tuple(b.change_pct for b in shown)
    gone = next((why for why in map(_base_side_gone, shown) if why), "")
    if gone:
        return _annotate(c, Confirmation(kind="not_settled", changes=changes, reason=gone))
    want: Verdict = "regression" if (c.change_pct or 0.0) > 0 else "improvement"
    if all(b.verdict == want for b in shown):
        found = Confirmation(kind="settled", where=(BESIDE,), changes=changes)
        return replace(_annotate(c, found), verdict=want)
    verdicts = tuple(b.verdict for b in shown)
    left = _annotate(
        c, Confirmation(kind="unsettled", where=(BESIDE,), changes=changes, paired=verdicts)
    )
    if len(set(verdicts)) == 1 and verdicts[0] in ("regression", "improvement"):
        # the pairing is sure, and says the opposite of the stored comparison (a baseline
        # measured far off its speed): neither can be taken alone
        return replace(left, verdict="inconclusive")
    return left


def _paired_round(
    results: Sequence[VariantResult], base: Sequence[VariantResult], th: Thresholds
) -> dict[tuple[str, str, str], Comparison]:
    """The items of one round that were measured beside the base commit, judged as same-job
    A/B judges them (paired, Benjamini-Hochberg over the round)."""
    keys = {r.key for r in base}
    if not keys:
        return {}
    head_run = Run(
        commit=None, machine="", environment={}, results=tuple(r for r in results if r.key in keys)
    )
    base_run = Run(commit=None, machine="", environment={}, results=tuple(base))
    return {
        (c.test, c.variant, c.metric): c for c in compare_runs(base_run, head_run, th, paired=True)
    }


def _base_side_gone(beside: Comparison | None) -> str:
    """Why the base commit's side of an A/B pairing gave nothing to compare with ('' when
    it did, or when the item was not measured beside the base commit)."""
    if beside is None or beside.verdict not in ("error", "missing", "new"):
        return ""
    note = f" ({beside.note})" if beside.note else ""
    return f"the base commit's side: {beside.verdict}{note}"


def _annotate(c: Comparison, found: Confirmation) -> Comparison:
    said = any(r.kind == "confirmation" for r in c.reasons)  # its words follow the record
    return replace(c if said else c.with_reason(reason("confirmation")), confirmation=found)
