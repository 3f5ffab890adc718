"""What the report says of a run beside its verdicts: speed-ups over eager, the timings at
each declared shape, the traces written, what the compile cache did, and how the base side's
environment came to be."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfguard.records import Run, VariantResult


def speedups(results: Sequence[VariantResult]) -> dict[tuple[str, str], float]:
    """(test, variant) -> eager's p50 over this variant's, where both were measured."""
    eager = {
        r.test: r.metrics.latency_p50_ms
        for r in results
        if r.variant == "eager" and r.status == "ok"
    }
    out: dict[tuple[str, str], float] = {}
    for r in results:
        base, mine = eager.get(r.test), r.metrics.latency_p50_ms
        if r.status == "ok" and base and mine:
            out[r.key] = base / mine
    return out


def shape_sweeps(run: Run) -> list[tuple[VariantResult, dict[str, float] | None]]:
    """The results timed at each declared shape (compile-dynamic), each with the base's
    figures at those shapes where it has them (A/B)."""
    base = {r.key: r for r in run.baseline_results}

    def shapes(r: VariantResult | None) -> dict[str, float] | None:
        found = None if r is None else r.details.build.get("shapes_p50_ms")
        if not isinstance(found, dict):
            return None
        return {str(k): float(v) for k, v in found.items() if isinstance(v, int | float)}

    return [(r, shapes(base.get(r.key))) for r in run.results if shapes(r)]


def trace_files(run: Run) -> dict[tuple[str, str], list[str]]:
    """(test, variant) -> the Chrome traces written for it, head side first, relative to the
    report (they sit in `traces/` beside it)."""
    found: dict[tuple[str, str], list[str]] = {}
    for results in (run.results, run.baseline_results):
        for r in results:
            profile = r.details.profile
            name = profile.get("trace") if isinstance(profile, dict) else None
            if isinstance(name, str) and name:
                found.setdefault(r.key, []).append(f"traces/{name}")
    return found


def compile_cache_line(run: Run) -> str:
    """What the compile cache did for this run's compiled items, or "" without one."""
    said: dict[str, list[str]] = {}
    for side, results in (("this tree", run.results), ("the base", run.baseline_results)):
        for r in results:
            state = r.details.build.get("compile_cache")
            if isinstance(state, str):
                said.setdefault(f"{side}: {state}", []).append(r.variant)
    if not said:
        return ""
    parts = [f"{where} {len(items)}" for where, items in sorted(said.items())]
    return (
        "; ".join(parts) + " (hit: compiled from main's artifacts, its cold compile the "
        "stored baseline's; miss: compiled cold; written: main's artifacts stored). This "
        "tree's cold compile is always measured in a fresh cache."
    )


def runs_in_line(runs_in: Mapping[str, Any] | None) -> str:
    """How the base side's environment came to be, in words ("": nothing to say)."""
    if not runs_in:
        return ""
    changed = ", ".join(str(p) for p in runs_in.get("changed") or ())
    altered = f"this change alters {changed}; " if changed else ""
    how = runs_in.get("how")
    if how == "built":
        seconds = float(runs_in.get("seconds") or 0)
        cost = (
            "from the cache"
            if runs_in.get("cached")
            else f"built in {seconds:.0f} s with {runs_in.get('installer')}"
        )
        return (
            f"{altered}the base side ran in an environment built from the base's own files ({cost})"
        )
    if how == "given":
        return f"the base side ran in {runs_in.get('python')}"
    if how == "failed":
        return (
            f"{altered}the base's environment could not be built, so the base side was not measured"
        )
    return ""
