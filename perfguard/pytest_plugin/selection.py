"""The selection step of a pull request's run, beside collection: the perf items its change
cannot affect are deselected (after `-k` and `-m` chose, before sharding, so that every shard
agrees) and listed in the results as unaffected, with the base's figures.

A run selects when it compares with a base commit on a pull request: same-job A/B (the base
measured beside it) or a stored baseline. Main's run (`--perfguard-save`), a push, a schedule,
a manual run, `--perfguard-full` and a run that compares with nothing measure everything.
What a change can reach is judged against the base's record of what each test ran
(`perfguard.selection`): the session's baseline, resolved once here and read again by the
finish.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.pytest_plugin.collection import measured_in_ab, test_id, variant_of
from perfguard.pytest_plugin.marker import settings_of
from perfguard.pytest_plugin.recording import FULL_EVENTS, test_key
from perfguard.records import Selection, Unaffected

_collected_key = pytest.StashKey[list[pytest.Item]]()
"""The perf items collected, before the selection (the A/B workers are first told these)."""

if TYPE_CHECKING:
    from perfguard.pipeline import Baseline
    from perfguard.pytest_plugin.state import SessionState
    from perfguard.selection import Decision


def select(state: SessionState, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the perf items the change cannot affect; note the selection in `state`."""
    perf = [i for i in items if variant_of(i) is not None]
    if not perf:
        return
    config.stash[_collected_key] = [i for i in items if measured_in_ab(i)]
    why_full = _why_full(state)
    if why_full:
        state.selection = Selection(partial=False, reason=why_full)
        return
    if state.options.ab is not None and state.ab is None:
        return  # A/B that starts later (a path outside the rootdir)
    if state.options.compare == "none" and state.ab is None:
        return  # nothing to compare with
    baseline = session_baseline(state, config)
    base = baseline.commit
    if base is None:
        return  # every item is new: nothing to leave out (or the comparison says why not)
    if baseline.differences:
        state.selection = Selection(
            partial=False,
            reason=f"the environment differs from the record of {base[:10]} "
            f"({baseline.differences[0]}): every perf item measured",
        )
        return
    decision = _decide(state, config, perf, baseline)
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
    dropped = [i for i in perf if test_key(i) not in decision.affected]
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
        reached={
            test_id(i, v): decision.reached[test_key(i)]
            for i in perf
            if test_key(i) in decision.reached and (v := variant_of(i)) is not None
        },
    )
    if dropped:
        gone = {id(i) for i in dropped}
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if id(i) not in gone]


def _why_full(state: SessionState) -> str:
    """Why this run measures everything, whatever changed ("" where it may select)."""
    o = state.options
    event = os.environ.get("GITHUB_EVENT_NAME", "")
    if o.save:
        return "main's run (--perfguard-save) measures everything"
    if o.full:
        return "--perfguard-full: every perf item measured"
    if event in FULL_EVENTS:
        return f"a {event} run measures everything"
    return ""


def session_baseline(state: SessionState, config: pytest.Config) -> Baseline:
    """The session's baseline, resolved once: the commit A/B measures beside, or the stored
    baseline `--perfguard-compare` chooses, with its record read."""
    if state.baseline is None:
        from perfguard.git import git_state_or_refusal
        from perfguard.pipeline import resolve_baseline
        from perfguard.pytest_plugin.finish import session_settings
        from perfguard.store.objects import open_store

        environment = state.environment or _environment(state, config)
        settings = session_settings(config, state, environment)
        git, _ = git_state_or_refusal(settings.root)
        beside = None if state.ab is None else (state.ab.commit, state.ab.reason)
        state.baseline = resolve_baseline(
            settings, git, open_store(settings.baseline_dir), environment, beside=beside
        )
    return state.baseline


def _environment(state: SessionState, config: pytest.Config) -> dict[str, Any]:
    """What this session measures on: in A/B, as this tree's worker reports it (the driver
    leaves torch to its workers); else this process's."""
    from perfguard.pytest_plugin.finish import fallback_environment

    ab = state.ab
    if ab is not None:
        nodeids = [i.nodeid for i in config.stash.get(_collected_key, [])]
        ab.driver.connect(nodeids, state.progress.note)
        if ab.driver.b.environment is not None:
            return ab.driver.b.environment
    return fallback_environment(state.options.device)


def _is_head(config: pytest.Config, base: str) -> bool:
    from perfguard.git import GitError, resolve_commit

    try:
        return resolve_commit(Path(config.rootpath), "HEAD") == base
    except GitError:
        return False


def _decide(
    state: SessionState, config: pytest.Config, perf: list[pytest.Item], baseline: Baseline
) -> Decision | None:
    from perfguard.git import GitError, file_at
    from perfguard.selection import PerfTest, changed_files, decide

    root = Path(config.rootpath)
    assert baseline.commit is not None
    base = baseline.commit
    tests: dict[str, PerfTest] = {}
    for item in perf:
        settings = settings_of(item)
        tests[test_key(item)] = PerfTest(
            Path(item.path), () if settings is None else settings.depends
        )
    every = tuple((state.options.depends or "").replace(",", " ").split())
    record = None if baseline.run is None else baseline.run.reach
    if baseline.run is None:
        no_record = f"no stored baseline of {base[:10]} on this machine holds a record"
    else:
        no_record = f"the baseline of {base[:10]} holds no record of what each test ran"

    def before(path: str) -> str | None:
        try:
            return file_at(root, base, root / path)
        except (GitError, ValueError):
            return None

    try:
        return decide(
            root,
            changed_files(root, base),
            tests,
            reach=record,
            no_record=no_record,
            every_test=every,
            before=before,
        )
    except GitError:  # the changes cannot be listed: everything is measured
        return None
