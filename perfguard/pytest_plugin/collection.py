"""Perf items: one per variant of each test that uses the `perfguard` fixture, and shards."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from perfguard.variants.spec import DEFAULT_VARIANTS

if TYPE_CHECKING:
    from perfguard.pytest_plugin.options import Options
    from perfguard.settings import MarkerSettings

VARIANT_PARAM = "_perfguard_variant"
SKIP_REASON = "perf test: measured only with --perfguard (run `pytest --perfguard`)"


def variants_for(options: Options, marker: MarkerSettings) -> tuple[str, ...]:
    """Command line > marker > ini > built-in default."""
    if options.variants is not None and options.sources.get("variants", "").startswith("--"):
        return options.variants
    if marker.variants is not None:
        return marker.variants
    if options.variants is not None:
        return options.variants
    return DEFAULT_VARIANTS


def test_name(metafunc_or_item: Any) -> str:
    """The node id of the test function (before parametrization by variant)."""
    return str(
        metafunc_or_item.definition.nodeid
        if hasattr(metafunc_or_item, "definition")
        else metafunc_or_item.nodeid
    )


def test_id(item: pytest.Item, variant: str) -> str:
    """The node id without the variant part: the `test` of a result."""
    nodeid = item.nodeid
    head, sep, params = nodeid.partition("[")
    if not sep:
        return nodeid
    params = params[:-1]
    if params == variant:
        return head
    if params.endswith("-" + variant):
        return f"{head}[{params[: -len(variant) - 1]}]"
    if params.startswith(variant + "-"):
        return f"{head}[{params[len(variant) + 1 :]}]"
    return nodeid


def test_of(nodeid: str) -> str:
    """The test function's node id of an item's (every variant and parameter together)."""
    return nodeid.partition("[")[0]


def times_itself(item: pytest.Item) -> bool:
    """A test that is no perf item but times itself with pytest-benchmark's `benchmark`
    fixture (recorded as variant `pytest-benchmark`; in A/B, run in both trees)."""
    return "benchmark" in getattr(item, "fixturenames", ()) and variant_of(item) is None


def measured_in_ab(item: pytest.Item) -> bool:
    """An item same-job A/B runs in both trees: a perf item, or a test that times itself."""
    return variant_of(item) is not None or times_itself(item)


def variant_of(item: pytest.Item) -> str | None:
    """The variant of a perf item; None for any other item."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    value = callspec.params.get(VARIANT_PARAM)
    return None if value is None else str(value)


def shard_items(
    items: list[pytest.Item], k: int, n: int
) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """(kept, deselected) for shard k of n: perf tests dealt round-robin in sorted order.

    Every variant of a test goes to the same shard; items that are not perf tests stay in
    every shard. The deal depends only on the collected test ids, so the N shard jobs agree.
    """
    tests = sorted({test_id(item, v) for item in items if (v := variant_of(item)) is not None})
    mine = {t for i, t in enumerate(tests) if i % n == k - 1}
    kept, dropped = [], []
    for item in items:
        variant = variant_of(item)
        if variant is None or test_id(item, variant) in mine:
            kept.append(item)
        else:
            dropped.append(item)
    return kept, dropped
