"""A generation's own figures, added to its result once its samples are taken: TTFT and TPOT
(percentiles over the samples, and per repeat for their comparisons), new tokens per second,
and how many of its new tokens are eager's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from perfguard.measure.drift import Reference
from perfguard.measure.sampling import SamplingOutcome
from perfguard.records import VariantResult
from perfguard.records.sketch import BlockStats
from perfguard.stats.summary import summarize
from perfguard.variants.generation import PHASES, PhasedClock, token_agreement

TOKENS_MAY_DIFFER = ("reduced-precision", "int8", "low-precision", "pruned")
"""Tolerance classes whose tokens may differ from eager's without failing the drift check
(their agreement is reported); the others must make eager's tokens exactly."""


def with_generation(
    result: VariantResult,
    clock: PhasedClock,
    outcome: SamplingOutcome,
    reference: Reference,
    new_tokens: int,
    batch: int,
    drift_note: str | None = None,
) -> VariantResult:
    """`result` (a generation's, measured with `clock`) with TTFT, TPOT, tokens per second,
    the token agreement and the per-repeat phases; `drift_note`: what its drift was judged
    on, where that is not the usual."""
    per_block = clock.per_block(outcome.warmup.calls, outcome.blocks_ms)
    phases = tuple((name, BlockStats.of(per_block[name])) for name in PHASES)
    figures: dict[str, Any] = {}
    for name in PHASES:
        summary = summarize([t for block in per_block[name] for t in block])
        figures.update(
            {
                f"{name}_p50_ms": summary.p50,
                f"{name}_p95_ms": summary.p95,
                f"{name}_p99_ms": summary.p99,
            }
        )
    p50 = result.metrics.latency_p50_ms
    figures["tokens_per_s"] = batch * new_tokens / (p50 / 1000) if p50 else None
    tokens, notes, check = clock.times.tokens, list(result.details.notes), result.drift_check
    if drift_note:
        notes.append(drift_note)
    if tokens is not None and reference.tokens is not None:
        prompt = int(reference.tokens.shape[1]) - new_tokens
        agreement = token_agreement(tokens, reference.tokens, prompt)
        figures["token_agreement"] = agreement
        if agreement < 1.0:
            total = int(tokens.shape[0]) * new_tokens
            differ = round((1 - agreement) * total)
            notes.append(f"{differ} of {total} new tokens differ from eager's")
            if check is not None and check.tolerance_class not in TOKENS_MAY_DIFFER:
                check = replace(check, passed=False)
    return replace(
        result,
        metrics=replace(result.metrics, **figures),
        phases=phases,
        drift_check=check,
        details=replace(result.details, notes=tuple(notes)),
    )
