"""The results of a run's shards, joined into one run: every shard once, of one commit and
one machine, no result measured twice; their comparisons, A/B base sides, confirmation
rounds, health warnings and runner time together (`perfguard merge`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from perfguard.errors import InputError
from perfguard.records.reach import Reach
from perfguard.records.results import VariantResult
from perfguard.records.runs import Run, RunCost


def check_shards(runs: Sequence[tuple[Path, Run]]) -> None:
    """Files of a sharded run must be every shard of it, once each (a missing shard would
    make a partial run, and a partial baseline)."""
    seen: dict[int, Path] = {}
    total: int | None = None
    for path, run in runs:
        label = run.settings.get("shard")
        if label is None:
            if seen:
                raise InputError(f"{path} is not a shard, the other files are: merge one run")
            continue
        k, _, n = str(label).partition("/")
        if not (k.isdigit() and n.isdigit()):
            raise InputError(f"{path}: its shard {label!r} is not K/N")
        if total is not None and int(n) != total:
            raise InputError(f"{path} is shard {label} of a run of {total} shards, not {n}")
        if int(k) in seen:
            raise InputError(f"shard {label} is in both {seen[int(k)]} and {path}")
        total = int(n)
        seen[int(k)] = path
    if total is not None:
        if len(seen) != len(runs):
            raise InputError("some files are shards and some are not: merge one run")
        missing = [f"{k}/{total}" for k in range(1, total + 1) if k not in seen]
        if missing:
            raise InputError(
                f"shard {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing: "
                "merge needs every shard's results file (did a shard job fail?)"
            )


def merge_runs(runs: Sequence[tuple[Path, Run]]) -> Run:
    """Join shard results of one run: same commit and machine, no result measured twice."""
    check_shards(runs)
    (first_path, first), rest = runs[0], runs[1:]
    seen = {r.key: first_path for r in first.results}
    results = list(first.results)
    comparisons = list(first.comparisons)
    base_side = list(first.baseline_results)  # same-job A/B shards: each its base side
    confirm = [list(rs) for rs in first.confirm_results]  # round k of every shard together
    confirm_base = [list(rs) for rs in first.confirm_base_results]  # their A/B base sides
    warnings = list(first.health_warnings)
    gaps = list(first.incomplete)  # what any shard did not measure, the merged run did not
    for path, run in rest:
        if run.commit != first.commit:
            raise InputError(
                f"{path} is of commit {run.commit}, {first_path} of {first.commit}: "
                "only shards of one commit can be merged"
            )
        if run.machine != first.machine:
            raise InputError(
                f"{path} is of machine {run.machine!r}, {first_path} of "
                f"{first.machine!r}: only shards of one machine can be merged"
            )
        for r in run.results:
            if r.key in seen:
                raise InputError(
                    f"{r.test} [{r.variant}] is in both {seen[r.key]} and {path}: "
                    "shards must not overlap"
                )
            seen[r.key] = path
            results.append(r)
        comparisons.extend(run.comparisons)
        base_side.extend(run.baseline_results)
        _extend_rounds(confirm, run.confirm_results)
        _extend_rounds(confirm_base, run.confirm_base_results)
        warnings += [w for w in run.health_warnings if w not in warnings]
        gaps += [g for g in run.incomplete if g not in gaps]
    health = {**first.health, "warnings": warnings} if warnings else dict(first.health)
    return replace(
        first,
        results=tuple(results),
        comparisons=tuple(comparisons),
        health=health,
        baseline_results=tuple(base_side),
        confirm_results=tuple(map(tuple, confirm)),
        confirm_base_results=tuple(map(tuple, confirm_base)),
        cost=_summed([r.cost for _, r in runs]),
        incomplete=tuple(gaps),
        reach=joined_reach([r.reach for _, r in runs]),
        # a shard whose accept file did not read: the run accepts nothing, and fails
        accept_error=next((r.accept_error for _, r in runs if r.accept_error), None),
    )


def joined_reach(records: Sequence[Reach | None]) -> Reach | None:
    """The shards' records of what each test ran, as one (a shard without one adds none:
    its tests then have no record, and a pull request measures them)."""
    found = [r for r in records if r is not None]
    if not found:
        return None
    joined = found[0]
    for more in found[1:]:
        joined = joined.merged(more)
    return joined


def _summed(costs: Sequence[RunCost | None]) -> RunCost | None:
    """Every shard's runner time, summed; none when a shard does not say its own."""
    total = costs[0]
    for cost in costs[1:]:
        total = None if total is None or cost is None else total + cost
    return total


def _extend_rounds(
    rounds: list[list[VariantResult]], more: Sequence[Sequence[VariantResult]]
) -> None:
    """Round k of `more` joins round k of `rounds` (a shard may have made fewer rounds)."""
    for k, made in enumerate(more):
        if k == len(rounds):
            rounds.append([])
        rounds[k].extend(made)
