"""Choosing the baseline: which commit a run is compared with, and its stored record, read
once per session.

A session resolves its `Baseline` once, where it starts comparing: a pull request's
selection step reads it at collection (what each test ran at the base), and the finish
reads the same object (the figures, the thresholds, the history's start). A same-job A/B
run's base is the commit it measured beside; its stored record is context.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfguard.environment_diff import environment_differences
from perfguard.git import (
    BaselineChoice,
    GitError,
    GitState,
    explicit_baseline,
    find_baseline,
)
from perfguard.pipeline.inputs import FinishSettings, PipelineError
from perfguard.records import Run
from perfguard.store.baselines import BaselineStore
from perfguard.store.objects import ObjectStore
from perfguard.store.run_file import BaselineError


@dataclass(frozen=True)
class Baseline:
    """The base of a session's comparison: its commit and why it was chosen, the machine
    its record is filed under, the record itself (None: none stored), and how this
    session's environment differs from the record's. `error`: why it could not be chosen or
    read; a run compared with it stops with that line, and nothing is left out of it."""

    commit: str | None
    reason: str
    machine: str
    run: Run | None = None
    differences: tuple[str, ...] = ()
    error: str | None = None
    unread: str | None = None  # A/B: why the base's stored record (context) was not read

    @property
    def usable(self) -> bool:
        """Whether there is a readable record to compare with."""
        return self.error is None and self.run is not None


def check_can_save(
    state: GitState | None, allow_dirty: bool, prefix: str = "--perfguard-"
) -> str | None:
    """Why `--perfguard-save` (`prefix` + save) must refuse here, or None."""
    if state is None or state.head is None:
        return (
            f"{prefix}save needs a git checkout with a commit: the baseline is filed "
            "under HEAD's sha"
        )
    if state.dirty and not allow_dirty:
        return (
            f"{prefix}save refuses a working tree with uncommitted changes: the numbers "
            "would be filed under a commit that did not produce them. Commit or stash, or "
            f"pass {prefix}allow-dirty"
        )
    return None


def choose_baseline(
    settings: FinishSettings, state: GitState | None, store: BaselineStore | ObjectStore | None
) -> BaselineChoice:
    if settings.compare == "none":
        return BaselineChoice(
            None,
            settings.why_not_compared
            or f"comparison disabled ({settings.option_prefix}compare=none)",
        )
    if state is None:
        return BaselineChoice(
            None,
            "not compared: not inside a git repository, so there is no "
            "commit to find a baseline for",
        )

    def has(sha: str) -> bool:
        return store is not None and store.has(settings.machine, sha)

    if settings.compare == "auto":
        return find_baseline(
            settings.root, has, main_branch=settings.main_branch, depth=settings.baseline_depth
        )
    try:
        flag = f"{settings.option_prefix}compare"
        return explicit_baseline(settings.root, settings.compare, has, flag)
    except GitError as exc:
        raise PipelineError(f"{flag}: {exc}") from None


def resolve_baseline(
    settings: FinishSettings,
    state: GitState | None,
    store: BaselineStore | ObjectStore | None,
    environment: Mapping[str, Any],
    *,
    beside: tuple[str, str] | None = None,
) -> Baseline:
    """The session's baseline: the commit `beside` ((commit, why): same-job A/B's base), or
    the one `settings.compare` chooses, with its stored record read once."""
    machine = settings.machine
    commit: str | None
    try:
        if beside is not None:
            commit, reason = beside
        elif store is None:  # a run that compares with nothing opens no store
            commit, reason = None, choose_baseline(settings, None, None).reason
        else:
            choice = choose_baseline(settings, state, store)
            commit, reason = choice.commit, choice.reason
    except (PipelineError, GitError, BaselineError) as exc:  # BaselineError: an unlisted store
        return Baseline(None, str(exc), machine, error=str(exc))
    try:
        run = None if commit is None or store is None else store.load(machine, commit)
    except BaselineError as exc:
        if beside is None:  # the record the run is compared with: the comparison stops
            return Baseline(None, str(exc), machine, error=str(exc))
        return Baseline(commit, reason, machine, unread=str(exc))  # context: said, not fatal
    differences = () if run is None else environment_differences(run.environment, environment)
    return Baseline(commit, reason, machine, run, tuple(differences))
