"""The confirmation step of a stored-baseline comparison: measure, check, judge, summarize."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple

from perfguard.confirm.checks import BESIDE_FIRST, STORED, agreeing, disturbed, merge_retry
from perfguard.confirm.judge import confirm_verdicts
from perfguard.confirm.targets import Key, confirm_targets, is_flagged_latency, settle_targets
from perfguard.records import Comparison, Run, VariantResult
from perfguard.stats.verdicts import NoiseFloor, Thresholds


class ConfirmRound(NamedTuple):
    """One confirmation re-measure of the flagged (and undecided) items."""

    results: tuple[VariantResult, ...]
    # measured beside the base commit in one job (same-job A/B): that commit's side;
    # empty when the round was a fresh process of this tree alone
    base_results: tuple[VariantResult, ...] = ()


Remeasure = Callable[[Sequence[Key], str | None, Sequence[Key]], ConfirmRound]
"""(flagged, base commit, undecided): measures the flagged (test, variant) items again,
beside the given base commit where it can (None: no commit known), else in a fresh process;
the undecided items too, only when beside the base commit (nothing else can settle them).
An item it could not measure comes back as an error result, or not at all (never raises)."""


def confirm(
    comparisons: tuple[Comparison, ...],
    remeasure: Remeasure,
    commit: str | None,
    times: int,
    thresholds: Thresholds,
    noise: NoiseFloor,
    messages: list[str],
    *,
    settle: bool = True,
    reference: str = STORED,
) -> tuple[tuple[Comparison, ...], list[ConfirmRound]]:
    """The comparisons after `times` rounds of re-measuring, and the rounds (empty when
    nothing was measured again). `settle`: measure the undecided items too (stored mode).
    `reference`: what the comparisons' baseline is, as messages name it."""
    targets = confirm_targets(comparisons)
    undecided = settle_targets(comparisons, thresholds) if settle else []
    if not targets and not undecided:
        return comparisons, []
    rounds = [remeasure(targets, commit, undecided) for _ in range(times)]
    rounds, spoilt = retry_disturbed(
        comparisons, rounds, remeasure, commit, targets, undecided, messages, reference
    )
    if not targets and not any(r.results for r in rounds):
        return comparisons, []  # nothing flagged, and nothing measured beside the base commit
    confirmed = confirm_verdicts(
        comparisons,
        [r.results for r in rounds],
        thresholds,
        noise,
        bases=[r.base_results for r in rounds],
        disturbed=spoilt,
    )
    messages.append(summary(comparisons, confirmed, len(targets), len(undecided), rounds))
    return confirmed, rounds


def confirm_same_job(
    run: Run,
    commit: str,
    remeasure: Remeasure,
    times: int,
    thresholds: Thresholds,
    messages: list[str],
) -> Run:
    """Same-job A/B: each latency regression or improvement measured again beside the base
    commit `commit`, by a fresh pair of worker processes, and kept only when that round
    decides it too. Pairs cancel what changes between blocks, not what differs between the
    two processes: each runs at a speed of its own, and now and then two of them differ by
    more than the bar on identical code; a second pair rarely does so the same way. (Items
    the first round left undecided are not measured again: they had their extra pairs.)"""
    comparisons, rounds = confirm(
        run.comparisons,
        remeasure,
        commit,
        times,
        thresholds,
        {},
        messages,
        settle=False,
        reference=BESIDE_FIRST,
    )
    return with_rounds(replace(run, comparisons=comparisons), rounds)


def with_rounds(run: Run, rounds: Sequence[ConfirmRound]) -> Run:
    """`run` holding what its confirmation rounds measured (unchanged when none was made)."""
    if not rounds:
        return run
    return replace(
        run,
        confirm_results=tuple(r.results for r in rounds),
        confirm_base_results=tuple(r.base_results for r in rounds),
    )


def retry_disturbed(
    comparisons: Sequence[Comparison],
    rounds: Sequence[ConfirmRound],
    remeasure: Remeasure,
    commit: str | None,
    targets: Sequence[Key],
    undecided: Sequence[Key],
    messages: list[str],
    reference: str = STORED,
) -> tuple[list[ConfirmRound], list[dict[Key, str]]]:
    """Each round's disturbed items (`perfguard.confirm.checks`) measured once more. Returns
    the rounds and, per round, the items still disturbed, which confirm and withdraw
    nothing: unless both tries read the base commit alike, when it is the figure they were
    checked against (`reference`) that is off, and the pairing stands."""
    out: list[ConfirmRound] = []
    spoilt: list[dict[Key, str]] = []
    for r in rounds:
        bad = disturbed(comparisons, r.base_results, reference=reference)
        if bad:
            messages.append(
                f"confirmation: {len(bad)} item(s) measured once more, their round was "
                f"disturbed ({next(iter(bad.values()))})"
            )
            retry = remeasure(
                [k for k in targets if k in bad], commit, [k for k in undecided if k in bad]
            )
            merged = ConfirmRound(
                *merge_retry(r.results, r.base_results, retry.results, retry.base_results, bad)
            )
            still = disturbed(comparisons, merged.base_results, reference=reference)
            alike = agreeing(r.base_results, retry.base_results, still)
            if alike:
                messages.append(
                    f"confirmation: {len(alike)} item(s) read their base commit alike in two "
                    f"tries, far off {reference}: that figure is off, and the "
                    "pairing stands"
                )
            bad = {k: why for k, why in still.items() if k not in alike}
            r = merged
        out.append(r)
        spoilt.append(bad)
    return out, spoilt


def replay(
    rounds: Sequence[Sequence[VariantResult]], bases: Sequence[Sequence[VariantResult]] = ()
) -> Remeasure:
    """A `Remeasure` that hands back re-measures made earlier (the shards' own, when
    `perfguard merge` compares the whole run): round after round, the asked-for items,
    with the base commit's side of the rounds that were measured beside it."""
    pending = [
        (tuple(made), tuple(bases[k]) if k < len(bases) else ()) for k, made in enumerate(rounds)
    ]

    def remeasure(
        keys: Sequence[Key], base_commit: str | None, undecided: Sequence[Key] = ()
    ) -> ConfirmRound:
        made, base = pending.pop(0) if pending else ((), ())
        asked = {*keys, *undecided}
        return ConfirmRound(
            tuple(r for r in made if r.key in asked), tuple(r for r in base if r.key in asked)
        )

    return remeasure


def summary(
    before: Sequence[Comparison],
    after: Sequence[Comparison],
    items: int,
    undecided: int,
    rounds: Sequence[ConfirmRound],
) -> str:
    """The terminal's line about the confirmation step."""
    pairs = list(zip(before, after, strict=True))
    flagged = [(b, a) for b, a in pairs if is_flagged_latency(b) and b.gating]
    withdrawn = sum(a.verdict != b.verdict for b, a in flagged)
    unconfirmed = sum(None in a.confirm_change_pct for _, a in flagged)
    ab = sum(bool(r.base_results) for r in rounds)
    alone = len(rounds) - ab
    how = []
    if ab:
        how.append(f"{_times(ab)} beside the base commit (same-job A/B)")
    if alone:
        how.append("in a fresh process" if alone == 1 else f"in {alone} fresh processes")
    parts = []
    if items:
        parts.append(
            f"{items} flagged item(s) re-measured {' and '.join(how)}: "
            f"{len(flagged) - withdrawn} gating latency verdict(s) stood, {withdrawn} withdrawn"
            + (f", {unconfirmed} could not be re-measured" if unconfirmed else "")
        )
    if ab and undecided:
        settled = sum(
            a.gating and is_flagged_latency(a) and not is_flagged_latency(b) for b, a in pairs
        )
        parts.append(
            f"{undecided} undecided item(s) (median moved by the minimum change, no verdict) "
            f"measured {_times(ab)} beside the base commit: {settled} latency verdict(s) shown"
        )
    return "confirmation: " + "; ".join(parts)


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")
