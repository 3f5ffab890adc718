"""Verdicts per metric, baseline against current. Pure: two `Run`s in, `Comparison`s out.

Latency is judged on independent repeats (per-repeat percentiles), never on raw per-call
samples, which are autocorrelated within a process. A regression needs all of:
- statistical significance after a Benjamini-Hochberg correction over the whole run;
- a practical minimum change (`min_change_pct`, settable per test);
- a change beyond the noise floor learned from history, where one is known.
In same-job A/B mode (`paired=True`) the repeats of both sides were interleaved, so paired
tests on the log block ratios (their mean and their trimmed mean, Bonferroni) replace Welch,
and `ab_min_change_pct` the history noise floor.
Memory uses a small relative tolerance, compile time a generous ratio, and drift its
tolerance class (every run) and the baseline's drift.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from perfguard.records import Comparison, Run, VariantResult, Verdict
from perfguard.settings import THRESHOLD_KEYS, threshold_default
from perfguard.stats.exact import exact_comparisons
from perfguard.stats.sequential import look_alpha
from perfguard.stats.tests import (
    benjamini_hochberg,
    bootstrap_ci,
    cohens_d,
    min_detectable_pct,
    paired_cohens_d,
    paired_min_detectable_pct,
    paired_test,
    welch_t_test,
)

LATENCY_METRICS: dict[str, float] = {
    "latency_p50_ms": 50.0,
    "latency_p95_ms": 95.0,
    "latency_p99_ms": 99.0,
}


@dataclass(frozen=True)
class Thresholds:
    """The rules in force; all of them appear in the report's methodology note."""

    # the defaults a user can change are those of the settings table (perfguard.settings)
    alpha: float = threshold_default("alpha")
    min_change_pct: float = threshold_default("min_change_pct")
    # same-job A/B cancels between-run noise: a lower bar
    ab_min_change_pct: float = threshold_default("ab_min_change_pct")
    min_repeats: int = 3
    gate_p99: bool = threshold_default("gate_p99")
    gate_ops: bool = threshold_default("gate_ops")  # operator-count and FLOP changes gate
    # callgrind counts: a change past this is a verdict
    instructions_pct: float = threshold_default("instructions_pct")
    memory_tolerance_pct: float = threshold_default("memory_tolerance_pct")
    compile_ratio: float = threshold_default("compile_ratio")
    drift_growth: float = 2.0  # drift may grow by this factor over the baseline's ...
    drift_floor_rel: float = 1e-4  # ... or stay below this relative size, without a verdict
    per_test: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def for_test(self, test: str) -> Thresholds:
        """These thresholds with one test's overrides (from its marker) applied."""
        overrides = self.per_test.get(test)
        if not overrides:
            return self
        known = {*THRESHOLD_KEYS, "min_repeats"}
        changes: dict[str, Any] = {k: v for k, v in overrides.items() if k in known}
        return replace(self, **changes)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Thresholds:
        """The thresholds a run recorded in its settings (unknown keys are ignored)."""
        known = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def to_json(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "min_change_pct": self.min_change_pct,
            "ab_min_change_pct": self.ab_min_change_pct,
            "min_repeats": self.min_repeats,
            "gate_p99": self.gate_p99,
            "gate_ops": self.gate_ops,
            "instructions_pct": self.instructions_pct,
            "memory_tolerance_pct": self.memory_tolerance_pct,
            "compile_ratio": self.compile_ratio,
            "drift_growth": self.drift_growth,
            "drift_floor_rel": self.drift_floor_rel,
            "per_test": {k: dict(v) for k, v in self.per_test.items()},
        }


NoiseFloor = Mapping[tuple[str, str, str], float]
"""(test, variant, metric) -> typical % change between successive baselines on main."""


def add_note(note: str, text: str) -> str:
    """`text` after what `note` already says ("; " between)."""
    return f"{note}; {text}" if note else text


def _change_pct(base: float | None, cur: float | None) -> float | None:
    if base is None or cur is None or base == 0:
        return None
    return 100.0 * (cur - base) / base


def practical_bar(test: str, variant: str, metric: str, th: Thresholds, noise: NoiseFloor) -> float:
    """The smallest |% change| a stored-baseline latency verdict may act on."""
    return max(th.min_change_pct, noise.get((test, variant, metric), 0.0))


def block_percentiles(result: VariantResult, q: float) -> list[float]:
    return [float(np.percentile(block, q)) for block in result.blocks() if block]


def _sequential_level(head: VariantResult, pairs: int, alpha: float) -> float:
    """The level of the look a sequential A/B item stopped at; `alpha` for a fixed design
    (results written before sampling until decided, or a run without it)."""
    ab = head.details.get("ab")
    if not isinstance(ab, Mapping) or "sequential" not in ab:
        return alpha
    return look_alpha(pairs, alpha) or alpha


@dataclass
class _Pending:
    """A latency comparison waiting for the run-wide correction of its p-value."""

    comparison: Comparison
    practical_pct: float
    raw_p: float


def _latency(
    test: str,
    variant: str,
    base: VariantResult,
    head: VariantResult,
    th: Thresholds,
    noise: NoiseFloor,
    paired: bool = False,
) -> list[_Pending | Comparison]:
    out: list[_Pending | Comparison] = []
    for metric, q in LATENCY_METRICS.items():
        gating = metric != "latency_p99_ms" or th.gate_p99
        b_val, h_val = getattr(base.metrics, metric), getattr(head.metrics, metric)
        change = _change_pct(b_val, h_val)
        a, b = block_percentiles(base, q), block_percentiles(head, q)
        common = dict(
            test=test,
            variant=variant,
            metric=metric,
            baseline=b_val,
            current=h_val,
            change_pct=change,
            gating=gating,
        )
        if len(a) < th.min_repeats or len(b) < th.min_repeats:
            out.append(
                Comparison(
                    **common,
                    p_value=None,
                    cohens_d=None,
                    verdict="inconclusive",
                    note=f"too few repeats ({len(a)} vs {len(b)}; need {th.min_repeats})",
                )
            )
            continue
        paired_blocks = paired and len(a) == len(b)
        level = th.alpha  # the level this comparison's test is held to
        if paired_blocks:
            # same-job A/B: block i of each side ran back to back, so test their ratios;
            # the history's noise floor (movement between runs) does not apply here
            p = paired_test(a, b)  # mean and trimmed mean of the log ratios
            level = _sequential_level(head, len(a), th.alpha)
            # sampled until decided: the look it stopped at spends alpha_k of alpha, so
            # p is scaled to be held to alpha like the others (BH over the run included)
            p = min(1.0, p * th.alpha / level)
            d = paired_cohens_d(a, b)
            floor = 0.0
            practical = th.ab_min_change_pct
            power_limit = paired_min_detectable_pct(a, b, alpha=level)
        else:
            _, p, _ = welch_t_test(a, b)
            d = cohens_d(a, b)
            floor = noise.get((test, variant, metric), 0.0)
            practical = practical_bar(test, variant, metric, th, noise)
            power_limit = min_detectable_pct(a, b, alpha=th.alpha)
        # what could have been flagged: the test's power limit, and never below the
        # practical minimum the rules demand
        mde = max(power_limit, practical)
        note = f"noise floor {floor:.1f}%" if floor else ""
        if paired_blocks:
            note = f"paired tests (mean, trimmed mean) over {len(a)} A/B block pairs"
            if level != th.alpha:
                note += f", sequential (level {level:.3g} at that look)"
        comparison = Comparison(
            **common,
            p_value=p,
            cohens_d=None if math.isinf(d) else d,
            verdict="unchanged",
            min_detectable_pct=None if math.isinf(mde) else mde,
            note=note,
            baseline_ci=bootstrap_ci(a),
            current_ci=bootstrap_ci(b),
        )
        out.append(_Pending(comparison, practical, p))
    return out


def _decide(pending: _Pending, adjusted_p: float, alpha: float) -> Comparison:
    c = pending.comparison
    change = c.change_pct or 0.0
    significant = adjusted_p < alpha
    practical = abs(change) >= pending.practical_pct
    verdict: Verdict
    note = c.note
    if significant and practical:
        verdict = "regression" if change > 0 else "improvement"
    elif practical:
        verdict = "inconclusive"
        note = add_note(note, "change is large but within the noise")
    else:
        verdict = "unchanged"
    if adjusted_p != pending.raw_p:
        note = add_note(note, f"p adjusted (BH) {adjusted_p:.3g}")
    return replace(c, verdict=verdict, note=note)


def _ratio_verdict(
    test: str,
    variant: str,
    metric: str,
    b_val: float | None,
    h_val: float | None,
    worse: Callable[[float, float], bool],
    better: Callable[[float, float], bool],
    note: str,
) -> Comparison | None:
    if b_val is None or h_val is None:
        return None
    verdict: Verdict = "unchanged"
    if worse(b_val, h_val):
        verdict = "regression"
    elif better(b_val, h_val):
        verdict = "improvement"
    return Comparison(
        test,
        variant,
        metric,
        b_val,
        h_val,
        _change_pct(b_val, h_val),
        None,
        None,
        verdict,
        note=note,
    )


def _memory(
    test: str, variant: str, base: VariantResult, head: VariantResult, th: Thresholds
) -> Comparison | None:
    """CUDA allocator peaks gate; a CPU process's peak RSS depends on everything the process
    loaded before this test, so there it is reported only."""
    tol = th.memory_tolerance_pct / 100.0
    exact = all(str(r.details.get("memory_method", "")).startswith("cuda") for r in (base, head))
    c = _ratio_verdict(
        test,
        variant,
        "peak_memory_bytes",
        base.metrics.peak_memory_bytes,
        head.metrics.peak_memory_bytes,
        lambda b, h: h > b * (1 + tol),
        lambda b, h: h < b * (1 - tol),
        f"tolerance {th.memory_tolerance_pct:g}%"
        if exact
        else "process peak RSS: reported, not gating",
    )
    return c if c is None or exact else replace(c, gating=False)


def _compile(
    test: str, variant: str, base: VariantResult, head: VariantResult, th: Thresholds
) -> Comparison | None:
    r = th.compile_ratio
    return _ratio_verdict(
        test,
        variant,
        "compile_time_s",
        base.metrics.compile_time_s,
        head.metrics.compile_time_s,
        lambda b, h: h > b * r,
        lambda b, h: h < b / r,
        f"ratio {r:g}x",
    )


def _drift(
    test: str, variant: str, base: VariantResult | None, head: VariantResult, th: Thresholds
) -> Comparison | None:
    check = head.drift_check
    if check is None:
        return None
    b_val = None if base is None else base.metrics.drift_max_rel
    h_val = head.metrics.drift_max_rel
    verdict: Verdict
    if not check.passed:
        verdict = "regression"
        note = (
            f"outside its tolerance class {check.tolerance_class}: error {check.error:.3g} "
            f"> allowed {check.allowed:.3g} against {check.reference}"
        )
    elif b_val is None:
        verdict = "new" if base is None else "unchanged"
        note = f"within tolerance class {check.tolerance_class}"
    elif h_val is not None and h_val > max(b_val * th.drift_growth, th.drift_floor_rel):
        verdict = "regression"
        note = f"drift grew more than {th.drift_growth:g}x over the baseline's"
    else:
        verdict = "unchanged"
        note = f"within tolerance class {check.tolerance_class}"
    return Comparison(
        test,
        variant,
        "drift_max_rel",
        b_val,
        h_val,
        _change_pct(b_val, h_val),
        None,
        None,
        verdict,
        note=note,
    )


def compare_runs(
    base: Run | None,
    head: Run,
    thresholds: Thresholds | None = None,
    noise: NoiseFloor | None = None,
    *,
    paired: bool = False,
) -> tuple[Comparison, ...]:
    """All comparisons of `head` against `base` (None: everything is `new`).

    `paired`: the two runs were measured in the same job, block i of each side back to
    back (same-job A/B), so latency is judged by a paired test on the block ratios.
    """
    th_all = thresholds or Thresholds()
    floor = noise or {}
    items: list[_Pending | Comparison] = []
    head_keys = {r.key for r in head.results}
    for r in head.results:
        th = th_all.for_test(r.test)
        b = None if base is None else base.result(r.test, r.variant)
        if r.status == "error":
            items.append(
                Comparison(
                    r.test,
                    r.variant,
                    "latency_p50_ms",
                    None if b is None else b.metrics.latency_p50_ms,
                    None,
                    None,
                    None,
                    None,
                    "error",
                    note=r.error or "",
                )
            )
            continue
        if r.status == "skipped":
            if b is not None and b.status == "ok":
                items.append(
                    Comparison(
                        r.test,
                        r.variant,
                        "latency_p50_ms",
                        b.metrics.latency_p50_ms,
                        None,
                        None,
                        None,
                        None,
                        "missing",
                        note=f"skipped here: {r.error}",
                    )
                )
            continue
        if b is None or b.status != "ok":
            why = "no baseline" if b is None else f"baseline was {b.status}"
            items.append(
                Comparison(
                    r.test,
                    r.variant,
                    "latency_p50_ms",
                    None,
                    r.metrics.latency_p50_ms,
                    None,
                    None,
                    None,
                    "new",
                    note=why,
                )
            )
            drift = _drift(r.test, r.variant, None, r, th)
            if drift is not None and drift.verdict == "regression":
                items.append(drift)
            continue
        items.extend(_latency(r.test, r.variant, b, r, th, floor, paired))
        items.extend(
            exact_comparisons(
                r.test,
                r.variant,
                b.counters,
                r.counters,
                gate_ops=th.gate_ops,
                instructions_pct=th.instructions_pct,
            )
        )
        for extra in (
            _memory(r.test, r.variant, b, r, th),
            _compile(r.test, r.variant, b, r, th),
            _drift(r.test, r.variant, b, r, th),
        ):
            if extra is not None:
                items.append(extra)
    if base is not None:
        for r in base.results:
            if r.key not in head_keys and r.status == "ok":
                items.append(
                    Comparison(
                        r.test,
                        r.variant,
                        "latency_p50_ms",
                        r.metrics.latency_p50_ms,
                        None,
                        None,
                        None,
                        None,
                        "missing",
                        note="in the baseline, not in this run",
                    )
                )
    pending = [i for i in items if isinstance(i, _Pending)]
    adjusted = benjamini_hochberg([p.raw_p for p in pending])
    decided = {
        id(p): _decide(p, q, th_all.for_test(p.comparison.test).alpha)
        for p, q in zip(pending, adjusted, strict=True)
    }
    out = tuple(decided[id(i)] if isinstance(i, _Pending) else i for i in items)
    forbid = forbidding_change(base, head)
    return withhold_speed_verdicts(out, forbid) if forbid else out


def is_flagged_latency(c: Comparison) -> bool:
    """A latency regression or improvement: what a confirmation re-measure must show again."""
    return c.verdict in ("regression", "improvement") and c.metric in LATENCY_METRICS


def confirm_targets(comparisons: Sequence[Comparison]) -> list[tuple[str, str]]:
    """(test, variant) of every latency regression or improvement: what to re-measure."""
    keys: list[tuple[str, str]] = []
    for c in comparisons:
        if is_flagged_latency(c) and (c.test, c.variant) not in keys:
            keys.append((c.test, c.variant))
    return keys


def settle_targets(
    comparisons: Sequence[Comparison], thresholds: Thresholds | None = None
) -> list[tuple[str, str]]:
    """(test, variant) of every item the stored comparison could not decide, and that is
    not a confirmation target already: its median moved by at least the minimum change,
    yet without a latency verdict (within the noise floor, or not significant). A baseline
    measured in a slow spell of the host hides a real slowdown that way; measured beside
    the base commit (same-job A/B), it shows."""
    flagged = set(confirm_targets(comparisons))
    return [key for key in _moved_keys(comparisons, thresholds) if key not in flagged]


def _moved_keys(
    comparisons: Sequence[Comparison], thresholds: Thresholds | None
) -> list[tuple[str, str]]:
    """Items whose median moved by at least the minimum change without a verdict."""
    th_all = thresholds or Thresholds()
    keys: list[tuple[str, str]] = []
    for c in comparisons:
        key = (c.test, c.variant)
        if key in keys or c.metric != "latency_p50_ms" or not _undecided(c):
            continue
        if abs(c.change_pct or 0.0) >= th_all.for_test(c.test).min_change_pct:
            keys.append(key)
    return keys


def _undecided(c: Comparison) -> bool:
    """A gating latency comparison that was tested and gave no regression or improvement."""
    return (
        c.metric in LATENCY_METRICS
        and c.gating
        and c.verdict in ("unchanged", "inconclusive")
        and c.p_value is not None
        and bool(c.change_pct)
    )


def confirm_verdicts(
    comparisons: Sequence[Comparison],
    remeasures: Sequence[Sequence[VariantResult]],
    thresholds: Thresholds | None = None,
    noise: NoiseFloor | None = None,
    *,
    bases: Sequence[Sequence[VariantResult]] = (),
    disturbed: Sequence[Mapping[tuple[str, str], str]] = (),
) -> tuple[Comparison, ...]:
    """Latency verdicts that must show again before they stand (stored-baseline mode).

    A process carries an offset of its own (a few % on a shared runner, for minutes at a
    time), which a test on the repeats inside it cannot see. So each latency regression or
    improvement is measured again, once per round in `remeasures`:
    - where `bases[k]` holds results, round k measured the base commit beside the head in
      one job (same-job A/B, block pairs interleaved), and the verdict stands only when the
      paired comparison of that round gives the same verdict: a slow spell of the host hits
      both sides alike, and the stored baseline's own offset is out of it;
    - otherwise round k is a fresh process of the head alone, and the verdict stands only
      when it moves the same way against the same baseline by at least the same practical
      bar (minimum change and noise floor).
    Any round not showing it makes the verdict `inconclusive`. A re-measure that could not
    be made leaves the verdict as it was, and says why; so does a round that failed its own
    checks (`disturbed[k]`: {item: why}, see `perfguard.stats.rounds`).

    The items of `settle_targets` are settled by the A/B rounds alone: a gating latency
    metric without a verdict takes the regression or improvement that every round gave
    beside the base commit, when it is the way the stored comparison moved too (the
    opposite way: `inconclusive`).
    """
    th_all = thresholds or Thresholds()
    floor = noise or {}
    settle = set(_moved_keys(comparisons, th_all))
    # per round: the paired comparisons of the items it measured beside the base commit
    paired = [
        _paired_round(results, bases[k] if k < len(bases) else (), th_all)
        for k, results in enumerate(remeasures)
    ]
    # per round: the items whose round failed its own checks (they neither confirm nor
    # withdraw anything)
    spoilt = [disturbed[k] if k < len(disturbed) else {} for k in range(len(remeasures))]
    out: list[Comparison] = []
    for c in comparisons:
        key = (c.test, c.variant)
        if key in settle and _undecided(c) and remeasures:
            why = next((bad[key] for bad in spoilt if key in bad), "")
            out.append(_annotate(c, f"not settled ({why})", ()) if why else _settled(c, paired))
            continue
        if not is_flagged_latency(c) or not remeasures:
            out.append(c)
            continue
        bar = practical_bar(c.test, c.variant, c.metric, th_all.for_test(c.test), floor)
        sign = 1.0 if c.verdict == "regression" else -1.0
        changes: list[float | None] = []
        missing = ""
        shown = True
        said: list[str] = []  # what the A/B rounds that did not show it decided instead
        ways: set[str] = set()
        for results, ab, bad in zip(remeasures, paired, spoilt, strict=True):
            again = next((r for r in results if r.key == (c.test, c.variant)), None)
            beside = ab.get((c.test, c.variant, c.metric))
            if again is not None and key in bad:  # the round failed its own checks
                missing = bad[key]
                changes.append(None)
                continue
            gone = _base_side_gone(beside)
            if again is not None and again.status == "ok" and gone:
                again = VariantResult(c.test, c.variant, "error", gone)
            if again is None or again.status != "ok":
                missing = "not re-measured" if again is None else f"re-measure {again.status}"
                if again is not None and again.error:
                    missing += f": {again.error}"
                changes.append(None)
                continue
            if beside is not None:
                ways.add("beside the base commit")
                changes.append(beside.change_pct)
                if beside.verdict != c.verdict:
                    shown = False
                    said.append(f"A/B: {beside.verdict}")
            else:
                ways.add("in a fresh process")
                change = _change_pct(c.baseline, getattr(again.metrics, c.metric))
                changes.append(change)
                shown = shown and change is not None and sign * change >= bar
        seen = ", ".join(f"{x:+.1f}%" for x in changes if x is not None)
        where = " and ".join(sorted(ways, reverse=True))
        if missing:
            out.append(_annotate(c, f"unconfirmed ({missing})", changes))
        elif shown:
            out.append(_annotate(c, f"shown again {where} ({seen})", changes))
        else:
            bars = [f"bar {bar:.1f}%"] if "in a fresh process" in ways else []
            why = f"not shown again {where} ({'; '.join([seen, *bars, *said])})"
            out.append(replace(_annotate(c, why, changes), verdict="inconclusive"))
    return tuple(out)


def _settled(
    c: Comparison, paired: Sequence[Mapping[tuple[str, str, str], Comparison]]
) -> Comparison:
    """`c`, undecided against the stored baseline, judged by the rounds that measured it
    beside the base commit (unchanged when a round did not)."""
    besides = [ab.get((c.test, c.variant, c.metric)) for ab in paired]
    if any(b is None for b in besides):
        return c  # not measured beside the base commit: nothing settles it
    shown = [b for b in besides if b is not None]
    changes = [b.change_pct for b in shown]
    seen = ", ".join(f"{x:+.1f}%" for x in changes if x is not None)
    gone = next((why for why in map(_base_side_gone, shown) if why), "")
    if gone:
        return _annotate(c, f"not settled ({gone})", changes)
    want: Verdict = "regression" if (c.change_pct or 0.0) > 0 else "improvement"
    if all(b.verdict == want for b in shown):
        return replace(
            _annotate(c, f"shown beside the base commit ({seen})", changes), verdict=want
        )
    verdicts = {b.verdict for b in shown}
    note = _annotate(c, f"beside the base commit: {', '.join(sorted(verdicts))} ({seen})", changes)
    if len(verdicts) == 1 and shown[0].verdict in ("regression", "improvement"):
        # the pairing is sure, and says the opposite of the stored comparison (a baseline
        # measured far off its speed): neither can be taken alone
        return replace(note, verdict="inconclusive")
    return note


def _paired_round(
    results: Sequence[VariantResult], base: Sequence[VariantResult], th: Thresholds
) -> dict[tuple[str, str, str], Comparison]:
    """The items of one confirmation round that were measured beside the base commit,
    judged as same-job A/B judges them (paired, Benjamini-Hochberg over the round)."""
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


def _annotate(c: Comparison, text: str, changes: Sequence[float | None]) -> Comparison:
    return replace(c, note=add_note(c.note, text), confirm_change_pct=tuple(changes))


def withhold_speed_verdicts(
    comparisons: Sequence[Comparison], reason: str
) -> tuple[Comparison, ...]:
    """Speed and memory regressions and improvements become inconclusive, with the reason.

    Drift keeps its verdict: numbers that are wrong are wrong on any machine.
    """
    return tuple(
        replace(c, verdict="inconclusive", note=add_note(c.note, reason))
        if c.verdict in ("regression", "improvement") and c.metric != "drift_max_rel"
        else c
        for c in comparisons
    )


HARDWARE_KEYS = ("device", "cpu", "cpu_count", "gpu_count", "torch_threads")
"""Environment keys whose change makes timings incomparable: no verdict across them."""


def forbidding_change(base: Run | None, head: Run) -> str:
    """Why no speed or memory verdict can be given between these runs ('' when it can)."""
    if base is None or not base.environment:
        return ""
    changed = [
        f"{key} {base.environment.get(key)} -> {head.environment.get(key)}"
        for key in HARDWARE_KEYS
        if key in base.environment
        and key in head.environment
        and base.environment[key] != head.environment[key]
    ]
    return "no verdict across a hardware change (" + ", ".join(changed) + ")" if changed else ""


def summarize_verdicts(comparisons: Sequence[Comparison]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in comparisons:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    return counts
