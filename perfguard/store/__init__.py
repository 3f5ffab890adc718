"""Baseline files: one per commit and machine, versioned, written atomically under a lock."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfguard.store.baselines import BaselineInfo, BaselineStore
    from perfguard.store.run_file import BaselineError, read_run_file

_FROM_BASELINES = ("BaselineError", "BaselineInfo", "BaselineStore", "read_run_file")


def __getattr__(name: str) -> Any:
    """The store's names load on first use: `perfguard.store.location`, which every pytest
    session reads its options with, must not bring the records (and numpy) with it."""
    if name in _FROM_BASELINES:
        from perfguard.store import baselines

        return getattr(baselines, name)
    raise AttributeError(f"module 'perfguard.store' has no attribute {name!r}")


__all__ = ["BaselineError", "BaselineInfo", "BaselineStore", "read_run_file"]
