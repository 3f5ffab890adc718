"""The end of a measuring session: instruction counts, then the pipeline (compare, write,
save) with this session's settings."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.pytest_plugin.options import OPTIONS, trace_dir
from perfguard.pytest_plugin.signals import STOPPED_BY
from perfguard.pytest_plugin.state import SessionState
from perfguard.records import VariantResult

if TYPE_CHECKING:
    from perfguard.confirm import Remeasure
    from perfguard.pipeline import Baseline, BaseMeasuredBeside, FinishSettings, PipelineOutcome
    from perfguard.pytest_plugin.options import Options
    from perfguard.records.reach import Reach
    from perfguard.stats.thresholds import Thresholds

outcome_key = pytest.StashKey["PipelineOutcome"]()
"""The pipeline's `PipelineOutcome`, for the terminal summary."""


def finish_session(session: pytest.Session, state: SessionState, exitstatus: int) -> None:
    """Compare, write and save what this session measured; set the exit status."""
    from perfguard.pipeline import Measured, Steps, finish_run

    config = session.config
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    counting = bool(state.options.instructions) and not interrupted
    try:
        same = _close_ab(config, state, interrupted=interrupted, counting=counting)
    except KeyboardInterrupt:  # stopped while the workers were ending: they end at once
        exitstatus = session.exitstatus = pytest.ExitCode.INTERRUPTED
        counting, same = False, _close_ab(config, state, interrupted=True, counting=False)
    if counting:
        state.results = count_instructions(config, state, Path(config.rootpath), state.results)
    o = state.options
    environment = state.environment or fallback_environment(o.device)
    health = None if state.monitor is None else state.monitor.stop()
    reach = _reach(state)

    def finish(status: int, remeasure: Remeasure | None) -> PipelineOutcome:
        measured = Measured(
            results=state.results,
            environment=environment,
            extra_settings=_recorded(state),
            health=health,
            same_job=same,
            started=state.started,
            incomplete=state.tally.gaps(
                state.nodeids.values(), status == pytest.ExitCode.INTERRUPTED, stopped_by()
            ),
            # (where a module did not collect, its tests are not known gone: that gap says it)
            collected=None
            if same is not None or state.tally.collection
            else frozenset(state.tally.collected),
            selection=state.selection,
            reach=reach,
        )
        steps = Steps(remeasure=remeasure, explain=_explainer(config, state, status))
        settings = _settings(config, state, status, environment)
        return finish_run(measured, settings, steps, baseline=_baseline(state, settings))

    try:
        outcome = finish(exitstatus, _remeasure(config, state, exitstatus))
    except KeyboardInterrupt:
        # stopped while comparing or confirming (a cancelled job): what was measured is
        # still written, unconfirmed and unsaved, and the run says it was stopped
        exitstatus = session.exitstatus = pytest.ExitCode.INTERRUPTED
        outcome = finish(exitstatus, None)
    from perfguard.pipeline.compare import say_loosened

    say_loosened(state.loosened, state.notes)  # an item's settings, put back to the base's
    if state.notes:
        outcome = replace(outcome, messages=(*state.notes, *outcome.messages))
    config.stash[outcome_key] = outcome
    _set_exit(session, state, outcome, exitstatus)


def _set_exit(
    session: pytest.Session, state: SessionState, outcome: PipelineOutcome, exitstatus: int
) -> None:
    """The session's exit status as the run says: an error, a gap or a regression fails."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and _partial(state):
        session.exitstatus = pytest.ExitCode.OK  # the change reaches no perf test: a pass
    if outcome.error is not None:
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    elif not outcome.run.complete and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # it did not measure it all
    elif (
        outcome.run.settings.get("fail_on", state.options.fail_on) == "regression"
        and outcome.run.has_regression
        and session.exitstatus == pytest.ExitCode.OK
    ):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _recorded(state: SessionState) -> dict[str, Any]:
    """The settings the results record: the options', the guarded ones a next change is
    judged against, and what this tree loosened and was put back."""
    out = {**state.options.recorded(), "guarded": state.guarded()}
    if state.loosened:
        out["loosened"] = [item.to_json() for item in state.loosened]
    return out


def _reach(state: SessionState) -> Reach | None:
    """What each perf test ran, when this run records: this process's recording, or this
    tree's A/B worker's (read when the workers stopped)."""
    if state.recording is not None:
        return state.recording.finish()
    if state.records and state.ab_reach is not None:
        return state.ab_reach
    return None


def _baseline(state: SessionState, settings: FinishSettings) -> Baseline | None:
    """The baseline the selection step resolved, when it was for this comparison (the same
    commit and machine); None: the pipeline resolves it."""
    known = state.baseline
    if known is None or known.machine != settings.machine or settings.compare == "none":
        return None
    return known


def _partial(state: SessionState) -> bool:
    return state.selection is not None and state.selection.partial


def stopped_by() -> str | None:
    """The signal that interrupted the session, if one did."""
    return STOPPED_BY[-1] if STOPPED_BY else None


def _close_ab(
    config: pytest.Config, state: SessionState, *, interrupted: bool, counting: bool
) -> BaseMeasuredBeside | None:
    """Same-job A/B: stop the workers, remove the base's worktree (after counting its
    instructions there), and hand over the base's side. None when not driving A/B."""
    from perfguard.pipeline import BaseMeasuredBeside
    from perfguard.pytest_plugin.ab import session as ab_session

    ab = state.ab
    if ab is None:
        return None

    def count_base() -> None:  # in the base's worktree, before it is removed
        ab.base_results = count_instructions(
            config, state, ab.worktree.rootdir, ab.base_results, " (base side)"
        )

    base_side = ab.driver.a
    deleted = base_side.others
    if base_side.collection_errors:
        state.tally.base_failure = (
            f"the base tree ({ab.commit[:10]}) did not collect {len(base_side.collection_errors)} "
            f"module(s), so its side of those items is missing ({base_side.collection_errors[0]})"
        )
    elif state.tally.base_errors and len(state.tally.base_errors) >= len(ab.items):
        state.tally.base_failure = (
            f"the base tree's ({ab.commit[:10]}) worker failed on every item "
            f"({next(iter(state.tally.base_errors.values()))})"
        )
    # before the monitor stops: the workers' CPU time is then ours
    ab.close(interrupted=interrupted, before_removal=count_base if counting else None)
    state.ab_reach = ab.driver.reach
    base = tuple(ab.base_results)
    # a test the base has beside ones this tree runs is this tree's deletion; one the driver
    # ran on the base side and this tree lacks is not (it has its own result)
    kept = {r.key for r in base} | state.tally.collected  # measured there, or here at all
    deleted = tuple(d for d in deleted if d not in kept)
    # where a module of this tree did not collect, its tests are not known gone: that gap says it
    state.tally.deleted = () if state.tally.collection else deleted
    return BaseMeasuredBeside(
        ab.commit,
        ab.reason,
        base,
        ab.base_environment or {},
        deleted=deleted,
        thresholds=ab_session.base_thresholds(ab),
        settings=ab_session.base_run(state, ab),
    )


def _settings(
    config: pytest.Config, state: SessionState, exitstatus: int, environment: dict[str, Any]
) -> FinishSettings:
    return replace(
        session_settings(config, state, environment),
        unsaved_reason=why_not_saved(state, exitstatus),
    )


def session_settings(
    config: pytest.Config, state: SessionState, environment: dict[str, Any]
) -> FinishSettings:
    """The pipeline's settings of this session (the selection step resolves the baseline
    with them, the finish compares with them)."""
    from perfguard.environment import machine_key

    o = state.options
    settings = finish_settings(
        o,
        root=Path(config.rootpath),
        machine=o.machine or machine_key(environment),
        compare=o.compare,
        unsaved_reason=None,
        thresholds=state.thresholds(),
    )
    if o.ab and state.ab is None:  # A/B with nothing measured has nothing to compare
        collection = state.tally.collection
        why = (
            f"{len(collection)} test module(s) of this tree did not collect ({collection[0][0]}: "
            f"{collection[0][1]})"
            if collection
            else "this tree has no perf item to measure (none collected, or none selected)"
        )
        settings = replace(settings, compare="none", why_not_compared=f"not compared: {why}")
    return settings


def finish_settings(
    o: Options,
    *,
    root: Path,
    machine: str,
    compare: str,
    unsaved_reason: str | None,
    thresholds: Thresholds,
) -> FinishSettings:
    """The pipeline's settings: each from the session's option of that meaning, or worked
    out by the session (the root, the machine, the comparison, the thresholds with the
    markers'); field by field, so that a renamed option is an error mypy sees, not a default
    taken in silence."""
    from perfguard.pipeline import FinishSettings

    return FinishSettings(
        root=root,
        baseline_dir=o.baseline_dir,
        machine=machine,
        compare=compare,
        main_branch=o.main_branch,
        baseline_depth=o.baseline_depth,
        save=o.save,
        save_replace=o.save_replace,
        unsaved_reason=unsaved_reason,
        allow_dirty=o.allow_dirty,
        report=o.report,
        json=o.json,
        thresholds=thresholds,
        unhealthy=o.unhealthy,
        fail_on=o.fail_on,
        given=frozenset(
            s.field for s in OPTIONS if s.loosens and o.sources.get(s.name, "").startswith("--")
        ),
        confirm=o.confirm,
        traces=trace_dir(o),
    )


def _remeasure(config: pytest.Config, state: SessionState, exitstatus: int) -> Remeasure | None:
    """How flagged items are measured again (`--perfguard-confirm`), or None."""
    o = state.options
    # (in EXCLUSIVE_PROCESS compute mode a second process cannot use the GPU: not attempted,
    # and the runner-health warning says why the verdicts stand unconfirmed)
    if o.compare == "none" or o.confirm <= 0 or state.exclusive_gpu:
        return None
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return None
    from perfguard.pytest_plugin.confirm import remeasurer

    return remeasurer(config, o, state.nodeids, state.measured_at, state.progress.note)


def _explainer(config: pytest.Config, state: SessionState, exitstatus: int) -> Remeasure | None:
    """How a memory verdict's item is measured once more with allocation recording (child
    sessions, beside the base commit where the checkout has it), or None."""
    from perfguard.orders import Orders

    o = state.options
    if o.compare == "none" or state.exclusive_gpu or exitstatus == pytest.ExitCode.INTERRUPTED:
        return None
    if o.orders.sites or o.orders.compile_cache == "load":
        return None  # a child session (recording sites, confirming): its caller explains
    from perfguard.pytest_plugin.confirm import remeasurer

    # the CUDA snapshots go beside this run's traces (its artifacts)
    told = Orders(sites=True, traces=str(trace_dir(o)))
    return remeasurer(config, o, state.nodeids, state.measured_at, state.progress.note, orders=told)


def count_instructions(
    config: pytest.Config,
    state: SessionState,
    root: Path,
    results: list[VariantResult],
    side: str = "",
) -> list[VariantResult]:
    """`results` with callgrind's instruction counts (`--perfguard-instructions`)."""
    from perfguard.pytest_plugin.confirm import plugin_args
    from perfguard.pytest_plugin.instructions import count_instructions as count

    extra: list[str] = []
    if config.inipath is not None:  # the same ini file, at its place in `root`'s tree
        ini = Path(config.inipath)
        with contextlib.suppress(ValueError):
            ini = root / ini.relative_to(Path(config.rootpath))
        extra += ["-c", str(ini)]
    extra += plugin_args(config.invocation_params.args)
    # (a base-side result has its head's key, and the same node id in the base's tree)
    return count(root, state.options, extra, results, state.nodeids, state.progress.note, side=side)


def why_not_saved(state: SessionState, exitstatus: int) -> str | None:
    """A session that did not run its whole suite must not become a baseline."""
    if state.collection_errors:
        return f"{state.collection_errors} collection error(s): fix them and save again"
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return "the session was interrupted"
    if exitstatus in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        return "the session ended with an internal or usage error"
    return None


def fallback_environment(device: str) -> dict[str, Any]:
    from perfguard.environment import collect_environment
    from perfguard.measure.runner import resolve_device

    try:
        return collect_environment(resolve_device(device))
    except Exception:  # no device at all: describe the CPU
        import torch

        return collect_environment(torch.device("cpu"))


def terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The perfguard section of pytest's terminal summary."""
    outcome = config.stash.get(outcome_key, None)
    if outcome is None:
        return
    from perfguard.report.terminal import summary_lines

    tr = terminalreporter
    tr.section("perfguard")
    writer = getattr(tr, "_tw", None)
    width = min(int(getattr(writer, "fullwidth", 100)), 100)
    for line in summary_lines(outcome.run, width=max(width, 80)):
        tr.write_line(line)
    for message in outcome.messages:
        tr.write_line(message)
    if outcome.report_path:
        tr.write_line(f"report: {outcome.report_path}")
    if outcome.json_path:
        tr.write_line(f"results: {outcome.json_path}")
    if not outcome.run.complete:
        from perfguard.records.gaps import summary

        tr.write_line(
            f"perfguard: incomplete run: {summary(outcome.run.incomplete)}", red=True, bold=True
        )
    if outcome.error:
        tr.write_line(f"perfguard error: {outcome.error}", red=True, bold=True)
    elif outcome.run.has_regression:
        tr.write_line("perfguard: regression found", red=True, bold=True)
