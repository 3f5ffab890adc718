"""A distributed step's figures per rank (`perfguard.distributed`): each rank's median step,
how unevenly the ranks reached each step, each rank's peak memory and share of its step in
collectives, and which rank was slowest. In the JSON they sit among the result's `details`,
as they always have; here they are read by attribute, checked when read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from perfguard.records.base import RecordError


@dataclass(frozen=True, kw_only=True)
class RankFigures:
    """See the module's docstring."""

    world_size: int
    backend: str = ""  # gloo, nccl
    rank_p50_ms: tuple[float, ...] = ()  # each rank's median step (ms)
    imbalance_p50: float | None = None  # a step's slowest rank over its fastest, median
    imbalance_max: float | None = None  # ... and at worst
    peak_memory_bytes_per_rank: tuple[int, ...] = ()
    collective_share: tuple[float, ...] = ()  # each rank's share of its step in collectives
    slowest_rank: int = 0

    def __post_init__(self) -> None:
        for name in ("rank_p50_ms", "collective_share"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        object.__setattr__(
            self,
            "peak_memory_bytes_per_rank",
            tuple(int(v) for v in self.peak_memory_bytes_per_rank),
        )

    @property
    def mean_collective_share(self) -> float | None:
        """The ranks' mean share of a step spent in collectives (None: not profiled)."""
        shares = self.collective_share
        return sum(shares) / len(shares) if shares else None

    @property
    def compute_imbalance(self) -> float | None:
        """The ranks' work outside collectives, busiest over least busy (the ranks end a step
        together, so a straggler shows only as the others' time waiting in collectives)."""
        if len(self.collective_share) < 2:
            return None
        busy = [1.0 - share for share in self.collective_share]
        return max(busy) / min(busy) if min(busy) > 0 else None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    @classmethod
    def from_build(cls, build: Mapping[str, Any]) -> RankFigures | None:
        """The figures among a result's `details` (None: not a distributed result's)."""
        if "world_size" not in build:
            return None
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in build.items() if k in known})
        except (TypeError, ValueError) as exc:
            raise RecordError(f"a distributed result's figures do not read: {exc}") from None
