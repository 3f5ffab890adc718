"""Another tool's trace hook and the timed calls: a coverage session (pytest-cov, `coverage
run`) is paused while an item is timed, so its tracer never inflates a figure (it made p50
1.49x), and resumed after: it still sees the item's untimed calls, which run the same code.
A trace hook that cannot be paused (a debugger's, a tracer of another kind) stays, and the
run records it in its environment (`tracer`, a key that withholds speed verdicts against a
run measured without it)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def timed_alone() -> Iterator[str | None]:
    """Within it, no coverage session traces this thread; yields what trace hook is still on
    (its type's name), or None."""
    paused: list[Any] = []
    coverage = sys.modules.get("coverage")
    current = None if coverage is None else coverage.Coverage.current()
    collector = (
        getattr(current, "_collector", None) if getattr(current, "_started", False) else None
    )
    if collector is not None and callable(getattr(collector, "pause", None)):
        collector.pause()
        paused.append(collector)
    try:
        still = sys.gettrace()
        yield None if still is None else describe(still)
    finally:
        for collector in paused:
            collector.resume()


def describe(hook: Any) -> str:
    """A trace hook's name, as the environment records it."""
    owner = getattr(hook, "__self__", None)
    what = owner if owner is not None else hook
    return f"{type(what).__module__}.{type(what).__qualname__}"
