"""Deterministic runs and results for the pure-part tests (no torch)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from perfguard.records import (
    BaselineRef,
    Comparison,
    Details,
    DriftCheck,
    Metrics,
    Run,
    VariantResult,
)
from perfguard.stats.summary import summarize


def result(
    test: str,
    variant: str,
    center_ms: float,
    *,
    seed: int = 0,
    repeats: int = 5,
    per_block: int = 40,
    spread: float = 0.02,
    memory: float = 1e6,
    compile_s: float | None = None,
    drift: float = 0.0,
    drift_ok: bool = True,
    memory_method: str = "cuda max_memory_allocated",
) -> VariantResult:
    rng = random.Random(seed)
    blocks = [
        [
            center_ms * (1 + rng.gauss(0, spread)) * (1 + rng.gauss(0, spread / 2))
            for _ in range(per_block)
        ]
        for _ in range(repeats)
    ]
    samples = [abs(x) for b in blocks for x in b]
    s = summarize(samples)
    return VariantResult(
        test=test,
        variant=variant,
        status="ok",
        metrics=Metrics(
            latency_p50_ms=s.p50,
            latency_p95_ms=s.p95,
            latency_p99_ms=s.p99,
            latency_mean_ms=s.mean,
            latency_samples=s.n,
            peak_memory_bytes=memory,
            compile_time_s=compile_s,
            drift_max_abs=drift,
            drift_max_rel=drift,
            drift_cosine=1.0,
        ),
        samples_ms=tuple(samples),
        repeats_ms=tuple(sorted(b)[len(b) // 2] for b in blocks),
        block_sizes=tuple(len(b) for b in blocks),
        drift_check=DriftCheck(
            tolerance_class="exact" if variant == "eager" else "compiled-fp32",
            passed=drift_ok,
            error=drift,
            eager_error=0.0,
            allowed=1e-4,
            reference="fp64",
        ),
        details=Details(memory_method=memory_method, tails_too_few=("p99",)),
    )


def run(
    results: list[VariantResult], commit: str = "a" * 40, machine: str = "cuda-test-gpu", **env: str
) -> Run:
    return Run(
        commit=commit,
        machine=machine,
        environment={"torch": "2.13.0", "python": "3.11.7", "device": "Test GPU", **env},
        results=tuple(results),
        baseline=BaselineRef(commit=None, reason="not compared"),
        created="2026-11-22T00:00:00+00:00",
    )


def from_blocks(blocks: Sequence[Sequence[float]], details: Details | None = None) -> VariantResult:
    """An `ok` result of test `t`, variant `eager`, whose repeat blocks are `blocks`."""
    samples = tuple(t for b in blocks for t in b)
    return VariantResult(
        test="t",
        variant="eager",
        status="ok",
        metrics=Metrics(
            latency_p50_ms=float(np.median(samples)),
            latency_p95_ms=float(np.percentile(samples, 95)),
            latency_p99_ms=float(np.percentile(samples, 99)),
        ),
        samples_ms=samples,
        block_sizes=tuple(len(b) for b in blocks),
        details=details or Details(),
    )


def kinds(c: Comparison) -> list[str]:
    """The kinds of a comparison's reasons, in order (what tests read instead of its words)."""
    return [r.kind for r in c.reasons]
