"""The change-point search over every series at once: on every core where the series are
many (a year of a busy main: over a thousand series of ten thousand commits, four of the
whole history's ten seconds searched on one core), in this process where they are few.

Each series' search (`find_steps`) depends on its own values alone, so the series are dealt to
worker processes, longest first, in balanced bundles, and the answers come back in order. The
workers are forked from a server that has imported the search once (`forkserver`: this
process may hold threads, which a plain fork must not copy). A pool that cannot start (no
semaphores in a sandbox, a worker killed) leaves the search to this process, as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING

from perfguard.history.changepoints import Detection, Step, find_steps

if TYPE_CHECKING:
    import numpy as np

PARALLEL_FROM = 1_000_000
"""Points in all from which the search is spread over the cores: below it, starting the
workers (about a second) costs more than it saves."""
BUNDLES_PER_WORKER = 4


def cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def steps_of_all(
    series: Sequence[np.ndarray],
    settings: Detection,
    *,
    parallel_from: int = PARALLEL_FROM,
) -> list[list[Step]]:
    """`find_steps` of each series, in order; spread over the cores from `parallel_from`
    points in all."""
    workers = min(cores(), len(series))
    if workers < 2 or sum(len(v) for v in series) < parallel_from:
        return [find_steps(v, settings) for v in series]
    bundles = _bundles(series, workers * BUNDLES_PER_WORKER)
    try:
        found = _in_workers(series, bundles, settings, workers)
    except (OSError, RuntimeError) as exc:  # BrokenProcessPool is a RuntimeError
        import sys

        print(f"note: the search ran on one core ({type(exc).__name__}: {exc})", file=sys.stderr)
        return [find_steps(v, settings) for v in series]
    out: list[list[Step]] = [[] for _ in series]
    for bundle, steps in zip(bundles, found, strict=True):
        for i, s in zip(bundle, steps, strict=True):
            out[i] = s
    return out


def _bundles(series: Sequence[np.ndarray], count: int) -> list[list[int]]:
    """The series' indices in `count` bundles of about equal points, the longest dealt first
    (the search grows faster than the length: long ones must not end up together)."""
    sizes = [0] * count
    bundles: list[list[int]] = [[] for _ in range(count)]
    for i in sorted(range(len(series)), key=lambda i: -len(series[i])):
        smallest = sizes.index(min(sizes))
        bundles[smallest].append(i)
        sizes[smallest] += len(series[i])
    return [b for b in bundles if b]


def _in_workers(
    series: Sequence[np.ndarray], bundles: list[list[int]], settings: Detection, workers: int
) -> list[list[list[Step]]]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["perfguard.history.changepoints"])
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        work = ([series[i] for i in bundle] for bundle in bundles)
        return list(pool.map(_search_bundle, work, repeat(settings)))


def _search_bundle(values: list[np.ndarray], settings: Detection) -> list[list[Step]]:
    return [find_steps(v, settings) for v in values]
