"""`compile-dynamic` at every shape a test declares: one compile with dynamic dimensions,
timed at each shape, its recompiles across the set counted with dynamo's reasons.

A test declares the shapes of its first positional input (`@pytest.mark.perfguard(shapes=
[[1, 128], [8, 128], [32, 128]])`); each is made as the example input is (its dtype, its
device; random values, integers below the example's largest for token ids). A change that
makes a dimension static again, or adds a guard on a size, recompiles at some shapes: the
count (`recompiles`, an exact signal that gates) grows, and the reasons say where. Past
dynamo's recompile limit (`torch._dynamo.config.recompile_limit`, 8 by default) a frame runs
eagerly: more shapes than that are refused, not measured past it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from perfguard.measure.clock import Clock
from perfguard.measure.sampling import sample_block

Shape = tuple[int, ...]


def label(shape: Shape) -> str:
    return "x".join(map(str, shape))


def input_of(example: torch.Tensor, shape: Shape) -> torch.Tensor:
    """An input of `shape` made as `example` is: its dtype and device."""
    if example.is_floating_point():
        return torch.randn(shape, dtype=example.dtype, device=example.device)
    high = max(int(example.max().item()) + 1, 2) if example.numel() else 2
    return torch.randint(0, high, shape, dtype=example.dtype, device=example.device)


@dataclass
class Sweep:
    """What the shapes gave: each one's median (ms), and dynamo's recompile reasons."""

    p50_ms: dict[str, float] = field(default_factory=dict)
    reasons: tuple[tuple[str, int], ...] = ()


def sweep(
    at: Callable[[Sequence[Any]], Callable[[], Any]],
    example: Sequence[Any],
    shapes: Sequence[Shape],
    clock: Clock,
    budget_ms: float,
) -> Sweep:
    """Time the compiled call at each shape (`at(inputs)`: the call with other inputs), a
    block of `budget_ms / len(shapes)` each after one warm call."""
    first, *rest = example
    found = Sweep()
    for shape in shapes:
        call = at((input_of(first, tuple(shape)), *rest))
        try:
            call()  # compiles where a guard fails: not timed
        except Exception as exc:  # a shape the model cannot take: say which, and why
            raise ValueError(
                f"compile-dynamic at shape {label(tuple(shape))}: {_root(exc)}"
            ) from exc
        block = sample_block(
            call, clock, min_samples=3, max_samples=1000, budget_ms=budget_ms / len(shapes)
        )
        found.p50_ms[label(tuple(shape))] = sorted(block)[len(block) // 2]
    found.reasons = recompile_reasons()
    return found


def _root(exc: BaseException) -> str:
    """The first line of the innermost cause (dynamo wraps the model's own error)."""
    while (inner := exc.__cause__ or exc.__context__) is not None:
        exc = inner
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


_WHERE = re.compile(r"\s+#.*$")


def recompile_reasons() -> tuple[tuple[str, int], ...]:
    """Dynamo's reasons for the recompiles so far (its guard failures), each without the
    source position it appends, and how often."""
    from torch._dynamo.utils import guard_failures

    counted: dict[str, int] = {}
    for failures in guard_failures.values():
        for text in failures:
            why = _WHERE.sub("", str(text)).split(": ", 1)[-1].strip()
            counted[why] = counted.get(why, 0) + 1
    return tuple(sorted(counted.items()))
