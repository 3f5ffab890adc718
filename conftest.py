"""Repository-wide test set-up: `cuda` tests skip cleanly where there is no GPU; under
`make gpu-check` a failure's traceback is printed as it happens."""

from __future__ import annotations

import os
import sys

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("cuda") for item in items):
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is available here")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With PERFGUARD_FAIL_NOW=1 (gpu-check sets it), a failure is printed when it happens,
    not in pytest's summary: a step stopped at its stage's deadline keeps what failed before."""
    if report.failed and os.environ.get("PERFGUARD_FAIL_NOW") == "1":
        sys.stderr.write(f"\n--- {report.nodeid} failed ({report.when}):\n")
        sys.stderr.write(report.longreprtext + "\n")
        sys.stderr.flush()
