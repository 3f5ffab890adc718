"""Baseline files: one per commit and machine, versioned, written atomically under a lock."""

from perfguard.store.baselines import BaselineError, BaselineInfo, BaselineStore, read_run_file

__all__ = ["BaselineError", "BaselineInfo", "BaselineStore", "read_run_file"]
