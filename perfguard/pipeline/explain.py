"""Explaining: each standing memory verdict with the allocation sites that changed most."""

from __future__ import annotations

from dataclasses import replace

from perfguard.confirm import Remeasure
from perfguard.records import Run
from perfguard.stats.memory_why import memory_keys, with_memory_why


def explain_memory(run: Run, explain: Remeasure | None, messages: list[str]) -> Run:
    """Each standing memory verdict with the allocation sites that changed most: its item
    measured once more in both trees (beside the base commit where the checkout has it),
    one recorded call each."""
    keys = memory_keys(run.comparisons)
    if explain is None or not keys:
        return run
    made = explain(keys, run.baseline.commit, ())
    head = {r.key: r for r in made.results if r.status == "ok"}
    base = {r.key: r for r in made.base_results if r.status == "ok"}
    if head and not base:
        messages.append(
            "allocation sites: the base commit's tree is not in this checkout, so only this "
            "tree's sites are shown (each as new)"
        )
    return replace(run, comparisons=with_memory_why(run.comparisons, base, head))
