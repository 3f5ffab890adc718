"""Against a stored baseline, a pull request's own settings do not take the power to see its
slowdown: each perf test's budget, repeats and drift tolerance are judged by the base
commit's record where this tree loosened them (its ini, its marker, `perfguard.run`'s
options), before anything is measured (`perfguard.stats.bars.floors`). Same-job A/B does the
same per item from the base tree's own worker (`ab/session.floor`)."""

from __future__ import annotations

import pytest

from perfguard.pytest_plugin.collection import test_of, variant_of
from perfguard.pytest_plugin.selection import session_baseline
from perfguard.pytest_plugin.state import SessionState
from perfguard.stats.bars import floors, read_guarded


def guard_items(state: SessionState, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Note in `state` each perf test's settings floor, against the stored baseline."""
    o = state.options
    perf = {test_of(i.nodeid) for i in items if variant_of(i) is not None}
    if o.ab is not None or o.compare == "none" or not perf:
        return
    baseline = session_baseline(state, config)
    if baseline.run is None or baseline.error is not None:
        return
    said = read_guarded(baseline.run.settings.get("guarded"))
    if said is None:
        return
    base_run, base_tests = said
    base_run = state.given_on_the_command_line(base_run) or {}
    present = {test_of(r.test) for r in baseline.run.results}
    theirs = {t: base_tests.get(t, {}) for t in present}
    mine = state.guarded()
    found, loosened = floors(
        mine["run"], {t: mine["tests"].get(t, {}) for t in perf}, base_run, theirs
    )
    state.floors = found
    state.note_loosened(loosened)
