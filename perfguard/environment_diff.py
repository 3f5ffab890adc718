"""Which differences between two environments can move the numbers. Pure, no torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfguard.records.environment import WATCHED_KEYS


def environment_differences(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    """One line per watched key whose value differs between the baseline and this run."""
    return [
        f"{key}: baseline {base.get(key)}, this run {head.get(key)}"
        for key in WATCHED_KEYS
        if base.get(key) != head.get(key)
        and (base.get(key) is not None or head.get(key) is not None)
    ]
