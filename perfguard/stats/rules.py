"""The verdicts that need no statistics of repeats: peak memory, compile time and drift."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from perfguard.records import Comparison, Metric, Reason, VariantResult, Verdict, reason
from perfguard.stats.thresholds import Thresholds, change_pct


def _ratio_verdict(
    head: VariantResult,
    metric: Metric,
    b_val: float | None,
    h_val: float | None,
    worse: Callable[[float, float], bool],
    better: Callable[[float, float], bool],
    why: Reason,
) -> Comparison | None:
    if b_val is None or h_val is None:
        return None
    verdict: Verdict = "unchanged"
    if worse(b_val, h_val):
        verdict = "regression"
    elif better(b_val, h_val):
        verdict = "improvement"
    return _row(head, metric, b_val, h_val, verdict, why)


def memory(base: VariantResult, head: VariantResult, th: Thresholds) -> Comparison | None:
    """CUDA allocator peaks gate; a CPU process's peak RSS depends on everything the process
    loaded before this test, so there it is reported only."""
    tol = th.memory_tolerance_pct / 100.0
    exact = all((r.details.memory_method or "").startswith("cuda") for r in (base, head))
    c = _ratio_verdict(
        head,
        "peak_memory_bytes",
        base.metrics.peak_memory_bytes,
        head.metrics.peak_memory_bytes,
        lambda b, h: h > b * (1 + tol),
        lambda b, h: h < b * (1 - tol),
        reason("memory_tolerance", pct=th.memory_tolerance_pct) if exact else reason("process_rss"),
    )
    return c if c is None or exact else replace(c, gating=False)


def compile_time(base: VariantResult, head: VariantResult, th: Thresholds) -> Comparison | None:
    r = th.compile_ratio
    return _ratio_verdict(
        head,
        "compile_time_s",
        base.metrics.compile_time_s,
        head.metrics.compile_time_s,
        lambda b, h: h > b * r,
        lambda b, h: h < b / r,
        reason("compile_ratio", ratio=r),
    )


def drift(base: VariantResult | None, head: VariantResult, th: Thresholds) -> Comparison | None:
    """Each variant against its tolerance class, and against the baseline's drift."""
    check = head.drift_check
    if check is None:
        return None
    b_val = None if base is None else base.metrics.drift_max_rel
    h_val = head.metrics.drift_max_rel
    verdict: Verdict
    if not check.judged:  # a model random in eval mode: neither a failure nor a growth
        why = reason("nondeterministic", spread=float(check.nondeterministic or 0.0))
        return _row(head, "drift_max_rel", b_val, h_val, "unchanged", why)
    if not check.passed:
        verdict = "regression"
        why = reason(
            "drift_outside",
            tolerance_class=check.tolerance_class,
            error=check.error,
            allowed=check.allowed,
            reference=check.reference,
        )
    elif b_val is None:
        verdict = "new" if base is None else "unchanged"
        why = reason("drift_within", tolerance_class=check.tolerance_class)
    elif h_val is not None and h_val > max(b_val * th.drift_growth, th.drift_floor_rel):
        verdict = "regression"
        why = reason("drift_grew", growth=th.drift_growth)
    else:
        verdict = "unchanged"
        why = reason("drift_within", tolerance_class=check.tolerance_class)
    return _row(head, "drift_max_rel", b_val, h_val, verdict, why)


def _row(
    head: VariantResult,
    metric: Metric,
    b_val: float | None,
    h_val: float | None,
    verdict: Verdict,
    why: Reason,
) -> Comparison:
    """A comparison decided by a rule, without a test of repeats (no p-value, no d)."""
    return Comparison(
        test=head.test,
        variant=head.variant,
        metric=metric,
        baseline=b_val,
        current=h_val,
        change_pct=change_pct(b_val, h_val),
        p_value=None,
        cohens_d=None,
        verdict=verdict,
        reasons=(why,),
    )
