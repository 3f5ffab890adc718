"""The steps after measuring in their order: choose the baseline, compare (and confirm),
explain the memory verdicts, accept, write, save."""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import replace

from perfguard.accept import with_accepts
from perfguard.git import GitError, GitState, git_state_or_refusal
from perfguard.pipeline.baseline import Baseline, resolve_baseline
from perfguard.pipeline.compare import (
    base_guarded,
    compare_beside,
    compare_stored,
    environment_steps,
    guard_run,
    with_base_figures,
    with_deleted,
    with_packages_first,
    without_unaffected,
)
from perfguard.pipeline.explain import explain_memory
from perfguard.pipeline.inputs import (
    FinishSettings,
    Measured,
    PipelineError,
    PipelineOutcome,
    Steps,
)
from perfguard.pipeline.write import save, write_outputs
from perfguard.records import BaselineRef, Run, RunCost, reason
from perfguard.report.outputs import keep_regressed_traces
from perfguard.stats.verdicts import withhold_speed_verdicts
from perfguard.store.baselines import BaselineStore
from perfguard.store.objects import ObjectStore, open_store
from perfguard.store.run_file import BaselineError


def finish_run(
    measured: Measured,
    settings: FinishSettings,
    steps: Steps | None = None,
    *,
    baseline: Baseline | None = None,
) -> PipelineOutcome:
    """Compare, write and save what was `measured`. Results are always written, even when
    comparing fails. `baseline`: the session's, resolved where it started comparing (a
    partial run's selection read it); None: resolved here."""
    steps = steps or Steps()
    finishing = time.monotonic()
    state, refused = git_state_or_refusal(settings.root)  # a refusal is said below
    store: BaselineStore | ObjectStore | None = None  # opened where it is read or written
    error: str | None = None
    run = _new_run(state, measured, settings, steps)
    messages = [f"runner health: {warning}" for warning in run.health_warnings]
    try:
        if refused is not None:
            raise refused
        if settings.compare != "none" or settings.save or measured.same_job is not None:
            store = open_store(settings.baseline_dir)  # else nothing reads or writes it
        if baseline is None:
            beside = measured.same_job
            baseline = resolve_baseline(
                settings,
                state,
                store,
                measured.environment,
                beside=None if beside is None else (beside.commit, beside.reason),
            )
        settings, run = _compare(run, measured, settings, steps, baseline, store, messages)
    except (BaselineError, PipelineError, GitError) as exc:
        error = f"comparison stopped: {exc}"
        run = replace(run, baseline=BaselineRef(commit=None, reason=error))
    cost = measured.cost
    if cost is None and measured.started is not None:
        cost = RunCost.between(measured.started, finishing, time.monotonic(), len(run.results))
    run = replace(run, cost=cost)

    if settings.traces is not None and settings.compare != "none" and error is None:
        keep_regressed_traces(run, settings.traces)
    failures: list[str] = [] if error is None else [error]
    if run.accept_error:  # never a silent pass: the check fails, the report says why
        failures.append(f"nothing accepted: {run.accept_error}")
    json_path, report_path = write_outputs(run, settings, messages, failures)
    saved = None
    if settings.save and store is not None:
        saved = save(run, settings, state, store, messages, failures, error is not None)
    elif settings.save:
        messages.append("baseline not saved: the comparison stopped (above)")
    error = "; ".join(failures) or None
    return PipelineOutcome(run, report_path, json_path, saved, tuple(messages), error)


def _compare(
    run: Run,
    measured: Measured,
    settings: FinishSettings,
    steps: Steps,
    baseline: Baseline,
    store: BaselineStore | ObjectStore | None,
    messages: list[str],
) -> tuple[FinishSettings, Run]:
    """The comparing steps, in order: the base's figures for what was left out, the run's
    settings judged by the base's, the comparison (and confirmation), the gaps, the runner's
    health, the accept file, the memory verdicts explained."""
    if run.selection is not None:
        run = replace(run, selection=with_base_figures(run.selection, baseline))
    settings, run = guard_run(settings, run, base_guarded(baseline, measured.same_job), messages)
    confirmed = settings.confirm if steps.remeasure else 0  # the rounds it is judged by
    run = replace(run, settings={**run.settings, "confirm": confirmed})
    if measured.same_job is not None:
        settings, run = compare_beside(
            run, measured.same_job, baseline, settings, messages, steps.remeasure
        )
    else:
        settings, run = compare_stored(run, baseline, settings, store, messages, steps.remeasure)
        run = environment_steps(run, baseline.run)
    run = with_packages_first(run, baseline.run)
    run = without_unaffected(run)
    if measured.collected is not None:
        run = with_deleted(run, measured.collected)
    if settings.unhealthy == "inconclusive" and run.health_warnings:
        unhealthy = reason("runner_health", warnings="; ".join(run.health_warnings))
        run = replace(run, comparisons=withhold_speed_verdicts(run.comparisons, unhealthy))
    run = with_accepts(run, settings.root, messages, measured.suite)
    return settings, explain_memory(run, steps.explain, messages)


def _new_run(
    state: GitState | None, measured: Measured, settings: FinishSettings, steps: Steps
) -> Run:
    """The run as measured, before any comparison."""
    return Run(
        commit=state.head if state else None,
        machine=settings.machine,
        environment=measured.environment,
        results=tuple(measured.results),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        settings={
            "thresholds": settings.thresholds.to_json(),
            **(measured.extra_settings or {}),
            # how many re-measures a flagged latency verdict had to survive (0: none)
            "confirm": settings.confirm if steps.remeasure else 0,
        },
        health={} if measured.health is None else measured.health.to_json(),
        incomplete=tuple(measured.incomplete),
        selection=measured.selection,
        reach=measured.reach,
    )
