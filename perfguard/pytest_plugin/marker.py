"""`@pytest.mark.perfguard(...)`: per-test settings, validated with errors naming the test.

The marker is read once per test function, where its items are generated, and merged with
the session's options into `ItemSettings`, kept on each of its items (`settings_of`): the
fixture, the time limit and the selection step read that, never the marker again.
"""

from __future__ import annotations

from typing import Any

import pytest

from perfguard.bounds import check
from perfguard.pytest_plugin.keys import item_settings_key
from perfguard.settings import MARKER_KEYS, ItemSettings, MarkerSettings
from perfguard.variants.spec import UnknownVariantError, parse_variant

# key -> (accepted types, description), from the one table of settings
KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    key: (s.marker_types, s.marker_what) for key, s in MARKER_KEYS.items()
}


MARKER = "@pytest.mark.perfguard"


def settings_of(item: pytest.Item) -> ItemSettings | None:
    """The settings kept on a perf item (None for any other item)."""
    return item.stash.get(item_settings_key, None)


def _fail(test: str, message: str) -> pytest.UsageError:
    return pytest.UsageError(f"{test}: {MARKER}: {message}")


def read_marker(test: str, marker: pytest.Mark | None) -> MarkerSettings:
    if marker is None:
        return MarkerSettings(None, {})
    if marker.args:
        raise _fail(test, "takes keyword arguments only, e.g. variants=['eager']")
    options: dict[str, Any] = {}
    for key, value in marker.kwargs.items():
        if key not in KEYS:
            raise _fail(test, f"unknown key {key!r}; known keys: {', '.join(sorted(KEYS))}")
        options[key] = check(
            MARKER_KEYS[key], value, f"{test}: {MARKER}: {key}", error=pytest.UsageError
        )
    variants = None
    if "variants" in marker.kwargs:
        names = [str(v) for v in marker.kwargs["variants"]]
        if not names:
            raise _fail(test, "variants is empty")
        for name in names:
            try:
                parse_variant(name)
            except UnknownVariantError as exc:
                raise _fail(test, str(exc)) from None
        variants = tuple(dict.fromkeys(names))
    options.pop("variants", None)
    return MarkerSettings(variants, options)
