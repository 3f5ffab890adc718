"""Which differences between two environments can move the numbers. Pure, no torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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


RUNTIME_KEYS = (
    ("torch", "torch"),
    ("cuda", "CUDA"),
    ("cudnn", "cuDNN"),
    ("triton", "Triton"),
    ("python", "Python"),
    ("gpu_driver", "the NVIDIA driver"),
    ("device", "the device"),
)
"""What the Dependencies block names beside the packages, where the two sides differ."""


@dataclass(frozen=True)
class PackageChange:
    """A distribution installed at another version on one side (None: not installed)."""

    name: str
    base: str | None
    head: str | None


def package_changes(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[PackageChange]:
    """Every distribution whose installed version differs between the two environments
    (their `packages`; none where either side did not record them), by name."""
    old, new = base.get("packages"), head.get("packages")
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return []
    return [
        PackageChange(str(name), _text(old.get(name)), _text(new.get(name)))
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]


def runtime_changes(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(what, base, head) for torch, CUDA, cuDNN, Triton, Python, the driver and the device,
    where the two sides differ and either recorded it."""
    return [
        (label, str(base.get(key)), str(head.get(key)))
        for key, label in RUNTIME_KEYS
        if base.get(key) != head.get(key)
        and (base.get(key) is not None or head.get(key) is not None)
    ]


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
