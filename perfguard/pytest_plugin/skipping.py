"""Without `--perfguard`: the perf items are collected, one per variant, and skipped with the
reason. The only role of a session that did not ask for perfguard, and light on purpose."""

from __future__ import annotations

import pytest

from perfguard.pytest_plugin.collection import SKIP_REASON, variant_of


class Skipping:
    """Without `--perfguard`: perf items are collected, and skipped with the reason."""

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        skip = pytest.mark.skip(reason=SKIP_REASON)
        for item in items:
            if variant_of(item) is not None:
                item.add_marker(skip)
