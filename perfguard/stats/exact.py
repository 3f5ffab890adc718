"""Exact verdicts: counters that do not vary between runs need no statistics.

More graphs, graph breaks or recompiles than the base is a `regression`, always gating: each is
a structural change of a compiled model (a split graph, a recompile per call). A change in the
ATen operators one call dispatches, or in its FLOPs, is reported with what changed (operators
added or gone, by name); it gates only where the test asks (`gate_ops=True` in its marker),
since a refactor may legitimately change them. Fewer of anything is an `improvement`.

A warm call that leaves memory allocated (`memory_growth_bytes_per_call`, allocations minus
frees from the profiler's events) past `GROWTH_ALLOWED` bytes is a leak: a gating regression
where the base kept less.

Instruction counts under callgrind (`compile_instructions`, `forward_instructions`) repeat to
a fraction of a percent, not exactly: a change past `instructions_pct` (1.5% by default, the
tolerance of PyTorch's own compile-time benchmarks) is a gating verdict; within it, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from perfguard.records import Comparison, Counters, Metric, Reason, Verdict, reason

GRAPH_COUNTERS: tuple[Metric, ...] = ("graphs", "backward_graphs", "graph_breaks", "recompiles")
INSTRUCTION_COUNTERS: tuple[Metric, ...] = ("compile_instructions", "forward_instructions")
GROWTH: Metric = "memory_growth_bytes_per_call"
EXACT_METRICS: tuple[Metric, ...] = (
    *GRAPH_COUNTERS,
    "aten_ops",
    "flops",
    *INSTRUCTION_COUNTERS,
    GROWTH,
)
GROWTH_ALLOWED = 256
"""Bytes per call a warm call may leave allocated before it is a leak: a little slack for a
cache that fills once in a while; a kept output of even 8 x 8 floats is past it."""
NAMED = 6  # operators named in a note, most changed first


def _pct(base: float, head: float) -> float | None:
    return None if base == 0 else (head - base) / base * 100.0


def _verdict(base: float, head: float) -> Verdict:
    return "regression" if head > base else "improvement" if head < base else "unchanged"


def _comparison(
    test: str, variant: str, metric: Metric, base: float, head: float, gating: bool, why: Reason
) -> Comparison:
    return Comparison(
        test=test,
        variant=variant,
        metric=metric,
        baseline=base,
        current=head,
        change_pct=_pct(base, head),
        p_value=None,
        cohens_d=None,
        verdict=_verdict(base, head),
        gating=gating,
        reasons=(why,),
    )


def _breaks_reason(base: Counters, head: Counters) -> Reason:
    before = dict(base.break_reasons)
    new = [(r, n - before.get(r, 0)) for r, n in head.break_reasons if n > before.get(r, 0)]
    if not new:
        return reason("exact_count")
    return reason(
        "new_graph_breaks",
        breaks="; ".join(
            f"{why.splitlines()[0]}" + (f" (x{n})" if n > 1 else "") for why, n in new
        ),
    )


def _recompiles_reason(base: Counters, head: Counters) -> Reason:
    """What dynamo said of the recompiles the head has and the base had not (its guard
    failures: a size made static again, a guard on a shape)."""
    before = dict(base.recompile_reasons)
    new = [(r, n - before.get(r, 0)) for r, n in head.recompile_reasons if n > before.get(r, 0)]
    if not new:
        return reason("exact_count")
    named = "; ".join(why + (f" (x{n})" if n > 1 else "") for why, n in new[:NAMED])
    return reason("new_recompiles", reasons=named)


def op_changes(base: Counters, head: Counters) -> list[tuple[str, int]]:
    """(operator, change in calls) of every operator whose count changed, most changed first."""
    before, after = dict(base.ops), dict(head.ops)
    changed = [(op, after.get(op, 0) - before.get(op, 0)) for op in {*before, *after}]
    return sorted(((op, d) for op, d in changed if d), key=lambda x: (-abs(x[1]), x[0]))


def _ops_reason(base: Counters, changes: list[tuple[str, int]]) -> Reason:
    before = dict(base.ops)
    parts = []
    for op, delta in changes[:NAMED]:
        if op not in before:
            parts.append(f"added {op} (x{delta})")
        elif before[op] + delta == 0:
            parts.append(f"gone {op} (x{-delta})")
        else:
            parts.append(f"{op} {before[op]} -> {before[op] + delta}")
    more = len(changes) - NAMED
    if not parts:
        return reason("same_operators")
    named = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
    return reason("op_changes", changes=named)


def _instructions(
    test: str, variant: str, metric: Metric, base: int, head: int, tolerance_pct: float
) -> Comparison:
    change = _pct(base, head) or 0.0
    region = "the cold compile" if metric == "compile_instructions" else "one warm call"
    c = _comparison(
        test,
        variant,
        metric,
        base,
        head,
        True,
        reason("instructions", region=region, change=change, tolerance=tolerance_pct),
    )
    verdict: Verdict = (
        "regression"
        if change > tolerance_pct
        else "improvement"
        if change < -tolerance_pct
        else "unchanged"
    )
    return replace(c, verdict=verdict)


def exact_comparisons(
    test: str,
    variant: str,
    base: Counters | None,
    head: Counters | None,
    *,
    gate_ops: bool,
    instructions_pct: float = 1.5,
) -> Iterator[Comparison]:
    """The exact comparisons of one test and variant; none where either side has no counts."""
    if base is None or head is None:
        return
    for metric in GRAPH_COUNTERS:
        b, h = getattr(base, metric), getattr(head, metric)
        if b is not None and h is not None:
            why = (
                _breaks_reason(base, head)
                if metric == "graph_breaks"
                else _recompiles_reason(base, head)
                if metric == "recompiles"
                else reason("exact_count")
            )
            yield _comparison(test, variant, metric, b, h, True, why)
    if base.op_total is not None and head.op_total is not None:
        changes = op_changes(base, head)
        deltas = [d for _, d in changes]
        c = _comparison(
            test,
            variant,
            "aten_ops",
            base.op_total,
            head.op_total,
            gate_ops,
            _ops_reason(base, changes),
        )
        # any operator called more often is more work, whatever the total says; but not where
        # the call does less arithmetic for it (an index that skips 92% of the FLOPs)
        b_flops, h_flops = base.flops, head.flops
        fewer_flops = b_flops is not None and h_flops is not None and h_flops < b_flops
        verdict: Verdict = (
            "improvement"
            if deltas and fewer_flops
            else "regression"
            if any(d > 0 for d in deltas)
            else "improvement"
            if deltas
            else "unchanged"
        )
        if (
            b_flops is not None
            and h_flops is not None
            and fewer_flops
            and any(d > 0 for d in deltas)
        ):
            c = c.with_reason(reason("flops_change", change=_pct(b_flops, h_flops) or 0.0))
        yield replace(c, verdict=verdict)
    if base.flops is not None and head.flops is not None:
        change = _pct(base.flops, head.flops)
        why = reason("flops_change", change=change) if change else reason("flops")
        yield _comparison(test, variant, "flops", base.flops, head.flops, gate_ops, why)
    for metric in INSTRUCTION_COUNTERS:
        b, h = getattr(base, metric), getattr(head, metric)
        if b is not None and h is not None:
            yield _instructions(test, variant, metric, b, h, instructions_pct)
    b, h = base.memory_growth_bytes_per_call, head.memory_growth_bytes_per_call
    if b is not None and h is not None:
        yield _growth(test, variant, b, h)


def _growth(test: str, variant: str, base: int, head: int) -> Comparison:
    """A leak is a regression when the head keeps more than `GROWTH_ALLOWED` bytes per call
    and more than the base did; below that both sides hold nothing between calls."""
    leaks = head > GROWTH_ALLOWED and head > base
    fixed = base > GROWTH_ALLOWED and head <= GROWTH_ALLOWED
    c = _comparison(
        test,
        variant,
        GROWTH,
        base,
        head,
        True,
        reason("leak", bytes=head) if leaks else reason("no_leak"),
    )
    verdict: Verdict = "regression" if leaks else "improvement" if fixed else "unchanged"
    return replace(c, verdict=verdict)
