"""Exact figures of one variant: counted, not timed (`perfguard.measure.counters`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from perfguard.records.base import RecordError


@dataclass(frozen=True, kw_only=True)
class Counters:
    """Exact figures of one variant: they do not vary between runs, so a change is certain.

    Counted in calls of their own, after the timed samples. `None`: not counted here (not a
    compiled variant, not on CUDA, or the counter was not available).
    """

    graphs: int | None = None  # graphs dynamo compiled
    backward_graphs: int | None = None  # a training step: backward graphs AOTAutograd compiled
    graph_breaks: int | None = None
    break_reasons: tuple[tuple[str, int], ...] = ()  # (dynamo's reason, how often)
    recompiles: int | None = None  # frames compiled again while sampling (and at its shapes)
    recompile_reasons: tuple[tuple[str, int], ...] = ()  # (dynamo's guard failure, how often)
    ops: tuple[tuple[str, int], ...] = ()  # ATen operators one call dispatches, by name
    flops: int | None = None  # of one call, torch.utils.flop_counter
    param_bytes: int | None = None
    buffer_bytes: int | None = None
    kernel_launches: int | None = None  # CUDA kernels one call launches
    cudagraph_launches: int | None = None  # CUDA graphs one call replays
    # instructions under callgrind (--perfguard-instructions), each in a process of its own
    compile_instructions: int | None = None  # the cold compile of a compiled variant
    forward_instructions: int | None = None  # one warm call
    # bytes of tensors a warm call leaves allocated (what it allocated minus what it freed: the
    # host's by the profiler's allocation events, the GPU's by the allocator's live bytes): 0
    # for a model that keeps nothing between calls
    memory_growth_bytes_per_call: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("break_reasons", "recompile_reasons", "ops"):
                pairs = tuple((str(k), int(n)) for k, n in value)
                if any(n < 0 for _, n in pairs):
                    raise RecordError(f"counters.{f.name} must count from 0")
                object.__setattr__(self, f.name, tuple(sorted(pairs)))
            elif value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise RecordError(f"counters.{f.name} must be a count, got {value!r}")
                object.__setattr__(self, f.name, int(value))

    @property
    def op_total(self) -> int | None:
        return sum(n for _, n in self.ops) if self.ops else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["break_reasons"] = dict(self.break_reasons)
        out["recompile_reasons"] = dict(self.recompile_reasons)
        out["ops"] = dict(self.ops)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Counters:
        if not isinstance(data, Mapping):
            raise RecordError(f"counters must be an object, got {data!r}")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("break_reasons", "recompile_reasons", "ops"):
            found = values.get(name) or {}
            if not isinstance(found, Mapping):
                raise RecordError(f"counters.{name} must be an object of counts")
            values[name] = tuple(found.items())
        return cls(**values)
