"""The selection step of a pull request's run, beside collection: the perf items its change
cannot affect are deselected (before sharding, so that every shard agrees) and listed in the
results as unaffected, with the base's figures.

A run selects when it compares with a base commit on a pull request: same-job A/B (the base
measured beside it) or a stored baseline. Main's run (`--perfguard-save`), a push, a schedule,
a manual run, `--perfguard-full` and a run that compares with nothing measure everything. What
a change can reach is `perfguard.selection`'s to say.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from perfguard.pytest_plugin.collection import test_id, variant_of
from perfguard.pytest_plugin.marker import read_marker
from perfguard.records import Selection, Unaffected

if TYPE_CHECKING:
    from perfguard.pytest_plugin.state import SessionState
    from perfguard.selection import Decision

FULL_EVENTS = ("push", "schedule", "workflow_dispatch", "merge_group")
"""GitHub Actions events whose run measures everything (main's record, scheduled and manual
runs): `GITHUB_EVENT_NAME`."""


def select(state: SessionState, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the perf items the change cannot affect; note the selection in `state`."""
    perf = [i for i in items if variant_of(i) is not None]
    if not perf:
        return
    base, why_full = _base(state, config)
    if base is None:
        if why_full:
            state.selection = Selection(partial=False, reason=why_full)
        return
    decision = _decide(state, config, perf, base)
    if decision is not None and not decision.changed and _is_head(config, base):
        # the base is this very commit (a noise check, or the same code measured twice):
        # a partial run would measure nothing
        state.selection = Selection(
            partial=False, reason="the base is HEAD itself: every perf item measured", base=base
        )
        return
    if decision is None or decision.full:
        reason = "the change could not be read" if decision is None else decision.reason
        changed = () if decision is None else decision.changed
        state.selection = Selection(
            partial=False, reason=reason, base=base, changed=changed, changed_count=len(changed)
        )
        return
    dropped = [i for i in perf if _test_of(i) not in decision.affected]
    state.selection = Selection(
        partial=bool(dropped),
        reason=decision.reason,
        base=base,
        changed=decision.changed,
        changed_count=len(decision.changed),
        unaffected=tuple(
            Unaffected(test=test_id(i, v), variant=v, baseline={})
            for i in dropped
            if (v := variant_of(i)) is not None
        ),
    )
    if dropped:
        gone = {id(i) for i in dropped}
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if id(i) not in gone]


def _is_head(config: pytest.Config, base: str) -> bool:
    from perfguard.git import GitError, resolve_commit

    try:
        return resolve_commit(Path(config.rootpath), "HEAD") == base
    except GitError:
        return False


def _test_of(item: pytest.Item) -> str:
    """The test function's node id (every variant of it goes together)."""
    return item.nodeid.partition("[")[0]


def _base(state: SessionState, config: pytest.Config) -> tuple[str | None, str]:
    """(the base commit the change is read against, "") for a pull request's run; (None,
    why it measures everything), or (None, "") for a run that compares with nothing."""
    o = state.options
    event = os.environ.get("GITHUB_EVENT_NAME", "")
    if o.save:
        return None, "main's run (--perfguard-save) measures everything"
    if o.full:
        return None, "--perfguard-full: every perf item measured"
    if event in FULL_EVENTS:
        return None, f"a {event} run measures everything"
    if state.ab is not None:
        return state.ab.commit, ""
    if o.ab is not None or o.compare == "none":
        return None, ""  # A/B that starts later (a path outside the rootdir), or nothing
    return _stored_base(state, Path(config.rootpath))


def _stored_base(state: SessionState, root: Path) -> tuple[str | None, str]:
    """The stored baseline's commit, unless its environment differs from this one (then its
    figures of an unmeasured item would not be this runner's)."""
    from perfguard.environment import machine_key
    from perfguard.environment_diff import environment_differences
    from perfguard.errors import PerfguardError
    from perfguard.git import git_state
    from perfguard.pipeline import FinishSettings, choose_baseline
    from perfguard.pytest_plugin.finish import fallback_environment
    from perfguard.store.objects import open_store

    o = state.options
    try:
        environment = fallback_environment(o.device)
        machine = o.machine or machine_key(environment)
        store = open_store(o.baseline_dir)
        settings = FinishSettings(
            root=root,
            baseline_dir=o.baseline_dir,
            machine=machine,
            compare=o.compare,
            main_branch=o.main_branch,
            baseline_depth=o.baseline_depth,
        )
        choice = choose_baseline(settings, git_state(root), store)
        if choice.commit is None:
            return None, ""  # every item is new: nothing to leave out
        base = store.load(machine, choice.commit)
    except PerfguardError as exc:  # said again, where it matters, when the run compares
        return None, f"no partial run: {exc}"
    differences = [] if base is None else environment_differences(base.environment, environment)
    if differences:
        return None, (
            f"the environment differs from the baseline of {choice.commit[:10]} "
            f"({differences[0]}): every perf item measured"
        )
    return choice.commit, ""


def _decide(
    state: SessionState, config: pytest.Config, perf: list[pytest.Item], base: str
) -> Decision | None:
    from perfguard.git import GitError
    from perfguard.selection import changed_files, decide

    root = Path(config.rootpath)
    tests: dict[str, tuple[Path, tuple[str, ...]]] = {}
    for item in perf:
        marker = read_marker(_test_of(item), item.get_closest_marker("perfguard"))
        globs = tuple(str(g) for g in marker.options.get("depends") or ())
        tests[_test_of(item)] = (Path(item.path), globs)
    every = tuple((state.options.depends or "").replace(",", " ").split())
    try:
        return decide(root, changed_files(root, base), tests, every_test=every)
    except GitError:  # the changes cannot be listed: everything is measured
        return None
