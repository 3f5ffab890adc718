"""`--perfguard-instructions`: each measured item run once more under callgrind, counted.

After every timed sample of the session (so no count disturbs a timing), each perf item that
was measured is run in a pytest process of its own under valgrind, which counts the asked
regions (see `perfguard.measure.callgrind`) and nothing else. The counts join the item's
exact counters; in same-job A/B the base commit's items are counted the same way, in its
worktree, so both sides of a comparison were counted alike.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from perfguard.measure.callgrind import CallgrindError, Counted, build_shim, run_counted
from perfguard.orders import Orders
from perfguard.pytest_plugin.options import Options
from perfguard.records import Counters, VariantResult
from perfguard.variants.spec import UnknownVariantError, parse_variant

TIMEOUT_S = 1800.0  # one item: a max-autotune compile under callgrind can take many minutes

Runner = Callable[[Sequence[str], Path, Sequence[str], Mapping[str, str], float], Counted]


def regions_for(variant: str, modes: Sequence[str]) -> tuple[str, ...]:
    """The regions that apply to `variant`: `compile` only where it compiles."""
    try:
        compiled = parse_variant(variant).is_compiled
    except UnknownVariantError:  # a recorded, not measured, variant (pytest-benchmark)
        return ()
    return tuple(m for m in modes if m != "compile" or compiled)


def _note(result: VariantResult, text: str) -> VariantResult:
    return replace(result, details=result.details.with_note(text))


def with_counts(result: VariantResult, counted: Counted) -> VariantResult:
    """`result` with the counted instructions in its counters (and a note if some failed)."""
    counters = replace(
        result.counters or Counters(),
        compile_instructions=counted.counts.get("compile"),
        forward_instructions=counted.counts.get("forward"),
    )
    done = replace(result, counters=counters)
    return done if counted.error is None else _note(done, f"instructions: {counted.error}")


def count_instructions(
    root: Path,
    options: Options,
    extra_args: Sequence[str],
    results: Sequence[VariantResult],
    nodeids: Mapping[tuple[str, str], str],
    say: Callable[[str], None],
    *,
    side: str = "",
    run: Runner = run_counted,
) -> list[VariantResult]:
    """`results` with their instruction counts, each item counted in a process of its own
    (pytest under callgrind, rootdir `root`). Never raises: what could not be counted is a
    note on its result."""
    todo = [
        (i, nodeids[r.key], regions)
        for i, r in enumerate(results)
        if r.status == "ok"
        and r.key in nodeids
        and (regions := regions_for(r.variant, options.instructions))
    ]
    out = list(results)
    if not todo:
        return out
    try:
        shim = build_shim()
    except CallgrindError as exc:
        for i, _, _ in todo:
            out[i] = _note(out[i], f"instructions not counted: {exc}")
        return out
    base = [*options.measuring_args(root, 1), *extra_args]
    for n, (i, nodeid, regions) in enumerate(todo, 1):
        say(
            f"counting instructions ({', '.join(regions)}) under callgrind{side}, "
            f"{n} of {len(todo)}: {nodeid}"
        )
        told = Orders(instructions=tuple(regions), shim=str(shim)).env()
        command = [sys.executable, "-m", "pytest", *base, nodeid]
        counted = run(command, root, regions, told, TIMEOUT_S)
        figures = ", ".join(f"{k} {v:,}" for k, v in counted.counts.items())
        say(f"  {figures or 'nothing counted'} in {counted.seconds:.0f}s")
        out[i] = with_counts(out[i], counted)
    return out
