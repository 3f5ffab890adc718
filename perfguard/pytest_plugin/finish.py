"""The end of a measuring session: instruction counts, then the pipeline (compare, write,
save) with the settings and the baseline of the session's plan."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.pytest_plugin.options import trace_dir
from perfguard.pytest_plugin.planning import fallback_environment, finish_settings
from perfguard.pytest_plugin.signals import STOPPED_BY
from perfguard.pytest_plugin.state import SessionState
from perfguard.records import VariantResult

if TYPE_CHECKING:
    from perfguard.confirm import Remeasure
    from perfguard.health import Monitor
    from perfguard.orders import Orders
    from perfguard.pipeline import BaseMeasuredBeside, PipelineOutcome
    from perfguard.plan import Plan
    from perfguard.records.reach import Reach

outcome_key = pytest.StashKey["PipelineOutcome"]()
"""The pipeline's `PipelineOutcome`, for the terminal summary."""

CloseBeside = Callable[[pytest.Config, bool, bool], "BaseMeasuredBeside | None"]
"""Same-job A/B's end: (config, interrupted, counting) -> the base's side, measured beside."""


@dataclass(frozen=True)
class Ending:
    """What the finish takes of the session's role: the health monitor to stop, how to read
    what each test ran (this process's recording, or this tree's A/B worker's), whether a
    second process may use the GPU (not in EXCLUSIVE_PROCESS mode: no confirmation), how to
    close same-job A/B, and what a re-measure's child sessions are told besides."""

    monitor: Monitor | None = None
    reach: Callable[[], Reach | None] | None = None
    exclusive_gpu: bool = False
    close_beside: CloseBeside | None = None
    remeasure_orders: Orders | None = None


def finish_session(
    session: pytest.Session, state: SessionState, exitstatus: int, ending: Ending
) -> None:
    """Compare, write and save what this session measured; set the exit status."""
    from perfguard.pipeline import Measured, Steps, finish_run

    config = session.config
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    counting = bool(state.options.instructions) and not interrupted
    close = ending.close_beside or (lambda _config, _interrupted, _counting: None)
    try:
        same = close(config, interrupted, counting)
    except KeyboardInterrupt:  # stopped while the workers were ending: they end at once
        exitstatus = session.exitstatus = pytest.ExitCode.INTERRUPTED
        counting, same = False, close(config, True, False)
    ledger = state.ledger
    if counting:
        ledger.results = count_instructions(config, state, Path(config.rootpath), ledger.results)
    plan = state.plan or _unplanned(state, config)
    environment = state.environment or dict(plan.environment)
    health = None if ending.monitor is None else ending.monitor.stop()
    reach = None if ending.reach is None else ending.reach()
    if reach is not None:
        say_ignored(Path(config.rootpath), reach, state.notes)

    def finish(status: int, remeasure: Remeasure | None) -> PipelineOutcome:
        measured = Measured(
            results=ledger.results,
            environment=environment,
            extra_settings=_recorded(state, plan),
            health=health,
            same_job=same,
            started=state.started,
            incomplete=state.tally.gaps(
                ledger.nodeids.values(), status == pytest.ExitCode.INTERRUPTED, stopped_by()
            ),
            # (where a module did not collect, its tests are not known gone: that gap says it)
            collected=None
            if same is not None or state.tally.collection
            else frozenset(state.tally.collected),
            selection=plan.selection,
            reach=reach,
            suite=frozenset(test for test, _ in state.tally.collected),
        )
        steps = Steps(remeasure=remeasure, explain=_explainer(config, state, status, ending))
        settings = replace(plan.settings, unsaved_reason=why_not_saved(state, status))
        baseline = plan.baseline if plan.settings.compare != "none" else None
        return finish_run(measured, settings, steps, baseline=baseline)

    try:
        outcome = finish(exitstatus, _remeasure(config, state, exitstatus, ending))
    except KeyboardInterrupt:
        # stopped while comparing or confirming (a cancelled job): what was measured is
        # still written, unconfirmed and unsaved, and the run says it was stopped
        exitstatus = session.exitstatus = pytest.ExitCode.INTERRUPTED
        outcome = finish(exitstatus, None)
    from perfguard.pipeline.compare import say_loosened

    say_loosened(list(plan.loosened), state.notes)  # an item's settings, put back to the base's
    if state.notes:
        outcome = replace(outcome, messages=(*state.notes, *outcome.messages))
    config.stash[outcome_key] = outcome
    _set_exit(session, state, outcome, exitstatus)


def say_ignored(root: Path, reach: Reach, notes: list[str]) -> None:
    """A record that holds files git ignores (a `lib/` of the project's own) says so: a
    change to them is invisible to git, and a CI checkout lacks them."""
    from perfguard.git import GitError, ignored

    try:
        hidden = ignored(root, [path for path, _ in reach.files])
    except (GitError, OSError):
        return
    if hidden:
        shown = ", ".join(hidden[:3]) + (f" and {len(hidden) - 3} more" if len(hidden) > 3 else "")
        notes.append(
            f"perfguard: the record of what each test ran holds {len(hidden)} file(s) git "
            f"ignores ({shown}): a change to them is invisible to git, so no pull request "
            "selects by it, and a CI checkout does not have them"
        )


def _unplanned(state: SessionState, config: pytest.Config) -> Plan:
    """A session that ended before its plan was made (interrupted while collecting): the
    plan of what its options say, comparing with nothing."""
    from perfguard.plan import Plan

    settings = finish_settings(state.options, root=Path(config.rootpath))
    environment = state.environment or fallback_environment(state.options.device)
    from perfguard.environment import machine_key

    why = "not compared: the session ended before its items were collected"
    return Plan(
        replace(
            settings,
            machine=settings.machine or machine_key(environment),
            compare="none",
            why_not_compared=why,
        ),
        environment,
    )


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


def _recorded(state: SessionState, plan: Plan) -> dict[str, Any]:
    """The settings the results record: the options', the guarded ones a next change is
    judged against, and what this tree loosened and was put back."""
    out = {**state.options.recorded(), "guarded": plan.guarded(state.options.guarded())}
    if plan.loosened:
        out["loosened"] = [item.to_json() for item in plan.loosened]
    return out


def _partial(state: SessionState) -> bool:
    selection = None if state.plan is None else state.plan.selection
    return selection is not None and selection.partial


def stopped_by() -> str | None:
    """The signal that interrupted the session, if one did."""
    return STOPPED_BY[-1] if STOPPED_BY else None


def _remeasure(
    config: pytest.Config, state: SessionState, exitstatus: int, ending: Ending
) -> Remeasure | None:
    """How flagged items are measured again (`--perfguard-confirm`), or None."""
    o = state.options
    # (in EXCLUSIVE_PROCESS compute mode a second process cannot use the GPU: not attempted,
    # and the runner-health warning says why the verdicts stand unconfirmed)
    if o.compare == "none" or o.confirm <= 0 or ending.exclusive_gpu:
        return None
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return None
    from perfguard.pytest_plugin.confirm import remeasurer

    ledger = state.ledger
    return remeasurer(
        config,
        o,
        ledger.nodeids,
        ledger.measured_at,
        state.progress.note,
        orders=ending.remeasure_orders,
    )


def _explainer(
    config: pytest.Config, state: SessionState, exitstatus: int, ending: Ending
) -> Remeasure | None:
    """How a memory verdict's item is measured once more with allocation recording (child
    sessions, beside the base commit where the checkout has it), or None."""
    from perfguard.orders import Orders

    o = state.options
    if o.compare == "none" or ending.exclusive_gpu or exitstatus == pytest.ExitCode.INTERRUPTED:
        return None
    if o.orders.sites or o.orders.compile_cache == "load":
        return None  # a child session (recording sites, confirming): its caller explains
    from perfguard.pytest_plugin.confirm import remeasurer

    # the CUDA snapshots go beside this run's traces (its artifacts)
    told = Orders(sites=True, traces=str(trace_dir(o)))
    ledger = state.ledger
    return remeasurer(
        config, o, ledger.nodeids, ledger.measured_at, state.progress.note, orders=told, sites=True
    )


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
    nodeids = state.ledger.nodeids
    return count(root, state.options, extra, results, nodeids, state.progress.note, side=side)


def why_not_saved(state: SessionState, exitstatus: int) -> str | None:
    """A session that did not run its whole suite must not become a baseline."""
    if state.tally.collection:
        return f"{len(state.tally.collection)} collection error(s): fix them and save again"
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return "the session was interrupted"
    if exitstatus in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        return "the session ended with an internal or usage error"
    return None


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
