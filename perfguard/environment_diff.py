"""Which differences between two environments can move the numbers. Pure, no torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WATCHED_VERSIONS = (
    "torch",
    "cuda",
    "gpu_driver",
    "cudnn",
    "python",
    "torchao",
    "onnxruntime",
    "torch_threads",
    "float32_matmul_precision",
    "tf32_matmul",
    "tf32_cudnn",
)


def environment_differences(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    """One line per watched key whose value differs between the baseline and this run."""
    return [
        f"{key}: baseline {base.get(key)}, this run {head.get(key)}"
        for key in WATCHED_VERSIONS
        if base.get(key) != head.get(key)
        and (base.get(key) is not None or head.get(key) is not None)
    ]
