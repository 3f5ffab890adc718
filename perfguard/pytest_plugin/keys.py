"""The plugin's keys in `config.stash` and `item.stash` (typed, as pytest wants state kept)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from perfguard.pytest_plugin.options import Options  # noqa: F401
    from perfguard.pytest_plugin.roles import Role  # noqa: F401
    from perfguard.pytest_plugin.state import SessionState  # noqa: F401
    from perfguard.settings import ItemSettings


options_key = pytest.StashKey["Options"]()
"""The session's options, read and checked in `pytest_configure` (with or without
`--perfguard`)."""
tests_key = pytest.StashKey[dict[str, "ItemSettings"]]()
"""Each perf test's settings (its marker merged with the options), by the test function's
node id; kept on each of its items too (`marker.settings_of`)."""
state_key = pytest.StashKey["SessionState"]()
"""A measuring session's state (with `--perfguard` only)."""
role_key = pytest.StashKey["Role"]()
"""The plugin object of a measuring session's role (`roles`), registered beside it."""
undo_key = pytest.StashKey[list[Callable[[], None]]]()
"""What `pytest_configure` changed in the process (signal handlers, import hooks)."""
item_settings_key = pytest.StashKey["ItemSettings"]()
"""A perf item's settings (`marker.settings_of`): its test's, kept on each of its items."""
recording_key = pytest.StashKey[Any]()
"""The session's `Recording` (what each perf test runs), when it records."""
