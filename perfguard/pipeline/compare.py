"""Comparing: a run against its stored baseline (with the noise floor learned from history
and the confirmation rounds), or against the base measured beside it in the same job."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from perfguard.confirm import Remeasure, confirm, confirm_same_job, with_rounds
from perfguard.environment_diff import package_changes, runtime_changes
from perfguard.pipeline.baseline import Baseline
from perfguard.pipeline.inputs import BaseMeasuredBeside, FinishSettings, PipelineError
from perfguard.records import BaselineRef, RecordError, Run, Selection, VariantResult, reason
from perfguard.records.gaps import deleted_gap
from perfguard.records.op_times import OpChange
from perfguard.records.selection import SHOWN_METRICS
from perfguard.report.format import rule
from perfguard.settings import GUARDED_RUN
from perfguard.stats.bars import RUN, Loosened, guard, guard_values, read_guarded
from perfguard.stats.op_verdicts import compare_results
from perfguard.stats.verdicts import (
    Thresholds,
    compare_runs,
    hardware_change_reason,
    missing_row,
)
from perfguard.stats.why import with_why
from perfguard.store.baselines import BaselineStore
from perfguard.store.history import load_history, noise_floor, with_trends
from perfguard.store.objects import ObjectStore


def compare_beside(
    run: Run,
    same_job: BaseMeasuredBeside,
    baseline: Baseline,
    settings: FinishSettings,
    messages: list[str],
    remeasure: Remeasure | None,
) -> tuple[FinishSettings, Run]:
    """Same-job A/B: compare with the base measured in this job (by thresholds none looser
    than the base tree's), confirm, add the stored baseline's context."""
    settings, run = guard_bars(settings, run, same_job.thresholds, messages)
    same_job = _stored_cold_compiles(same_job, baseline.run)
    run = _warm_compiles_not_gating(_compare_same_job(run, same_job, settings), same_job)
    messages.append(f"baseline: {same_job.commit[:10]} ({same_job.reason})")
    if remeasure is not None and settings.confirm > 0:
        run = confirm_same_job(
            run, same_job.commit, remeasure, settings.confirm, settings.thresholds, messages
        )
    return settings, _with_stored_context(run, baseline, settings, messages)


def compare_stored(
    run: Run,
    baseline: Baseline,
    settings: FinishSettings,
    store: BaselineStore | ObjectStore | None,
    messages: list[str],
    remeasure: Remeasure | None = None,
) -> tuple[FinishSettings, Run]:
    """Compare with the stored baseline, the noise floor learned from history, and confirm
    (by thresholds none looser than the baseline's)."""
    if baseline.error is not None:
        raise PipelineError(baseline.error)
    base = baseline.run
    if base is not None and base.settings.get("thresholds") is not None:
        try:
            theirs = Thresholds.from_json(base.settings["thresholds"])
        except RecordError as exc:
            raise PipelineError(f"the baseline of {baseline.commit}: {exc}") from None
        settings, run = guard_bars(settings, run, theirs, messages)
    run = replace(
        run,
        baseline=BaselineRef(
            commit=baseline.commit,
            reason=baseline.reason,
            environment=None if base is None else base.environment,
        ),
    )
    shown = baseline.commit[:10] if baseline.commit else "none"
    messages.append(f"baseline: {shown} ({baseline.reason})")
    noise: dict[tuple[str, str, str], float] = {}
    history = None
    if base is not None and baseline.commit is not None and store is not None:
        messages.extend(f"environment changed: {d}" for d in baseline.differences)
        history = load_history(
            store,
            settings.machine,
            settings.root,
            start=baseline.commit,
            last=settings.history_length,
        )
        noise = noise_floor(history)
        if noise:
            messages.append(f"noise floor learned from {history['commit'].nunique()} baselines")
    if settings.compare != "none":
        comparisons = compare_runs(base, run, settings.thresholds, noise)
        if remeasure is not None and settings.confirm > 0:
            comparisons, rounds = confirm(
                comparisons,
                remeasure,
                baseline.commit,
                settings.confirm,
                settings.thresholds,
                noise,
                messages,
            )
            run = with_rounds(run, rounds)
        if history is not None:
            comparisons = with_trends(comparisons, history)
        ops: tuple[OpChange, ...] = ()
        if base is not None:
            comparisons = with_why(comparisons, base.results, run.results)
            if hardware_change_reason(base, run) is None:  # a place's time moves with it
                ops = compare_results(base.results, run.results, settings.thresholds, paired=False)
        run = replace(run, comparisons=comparisons, op_comparisons=ops)
    return settings, run


def guard_run(
    settings: FinishSettings, run: Run, base: Mapping[str, Any] | None, messages: list[str]
) -> tuple[FinishSettings, Run]:
    """The run's settings that withhold or soften a verdict (`unhealthy`, `confirm`,
    `fail_on`), judged by the base's where this run loosened them (`perfguard.stats.bars`);
    what was put back is recorded and said, and the run records the values it was judged
    by."""
    mine = {
        "unhealthy": settings.unhealthy,
        "confirm": settings.confirm,
        "fail_on": settings.fail_on,
    }
    names = tuple(n for n in GUARDED_RUN if n not in settings.given)
    values, loosened = guard_values(mine, base, names)
    say_loosened(loosened, messages)
    settings = replace(
        settings,
        unhealthy=values["unhealthy"],
        confirm=values["confirm"],
        fail_on=values["fail_on"],
    )
    recorded = {
        **run.settings,
        "unhealthy": settings.unhealthy,
        "fail_on": settings.fail_on,
        **(
            {"loosened": [*run.settings.get("loosened", ()), *(i.to_json() for i in loosened)]}
            if loosened
            else {}
        ),
    }
    return settings, replace(run, settings=recorded)


def say_loosened(loosened: Iterable[Loosened], messages: list[str]) -> None:
    for item in loosened:
        where = "the run" if item.test == RUN else item.test
        messages.append(
            f"{where}: {item.rule} {rule(item.head)} is looser than the base commit's "
            f"{rule(item.base)}: judged by the base's (a slower change is accepted in "
            "perfguard-accept.toml)"
        )


def base_guarded(
    baseline: Baseline, same_job: BaseMeasuredBeside | None
) -> Mapping[str, Any] | None:
    """The base's run-level guarded settings: its tree's as its A/B worker said them, or its
    stored record's."""
    if same_job is not None:
        return same_job.settings
    said = None if baseline.run is None else read_guarded(baseline.run.settings.get("guarded"))
    return None if said is None else said[0]


def guard_bars(
    settings: FinishSettings, run: Run, base: Thresholds | None, messages: list[str]
) -> tuple[FinishSettings, Run]:
    """The thresholds this run is judged by: its own, but none looser than the base
    commit's (`perfguard.stats.bars`); what was put back is recorded and said."""
    guarded, loosened = guard(settings.thresholds, base)
    if not loosened:
        return settings, run
    say_loosened(loosened, messages)
    recorded = {
        **run.settings,
        "thresholds": guarded.to_json(),
        "loosened": [*run.settings.get("loosened", ()), *(i.to_json() for i in loosened)],
    }
    return replace(settings, thresholds=guarded), replace(run, settings=recorded)


def with_base_figures(selection: Selection, baseline: Baseline) -> Selection:
    """The unaffected items with the base's stored figures, where it has a readable record."""
    base = baseline.run
    if not selection.unaffected or base is None or selection.base != baseline.commit:
        return selection
    listed = []
    for u in selection.unaffected:
        r = base.result(u.test, u.variant)
        figures = {} if r is None else {m: getattr(r.metrics, m) for m in SHOWN_METRICS}
        listed.append(replace(u, baseline={k: v for k, v in figures.items() if v is not None}))
    return replace(selection, unaffected=tuple(listed))


def without_unaffected(run: Run) -> Run:
    """A partial run's unaffected items are not `missing`: they were left out on purpose."""
    if run.selection is None or not run.selection.unaffected:
        return run
    left = {(u.test, u.variant) for u in run.selection.unaffected}
    kept = [
        c for c in run.comparisons if not (c.verdict == "missing" and (c.test, c.variant) in left)
    ]
    return replace(run, comparisons=tuple(kept))


def with_deleted(run: Run, collected: frozenset[tuple[str, str]]) -> Run:
    """The run with a gap for the baseline's perf tests this tree no longer has at all."""
    gone = [
        (c.test, c.variant)
        for c in run.comparisons
        if c.verdict == "missing" and (c.test, c.variant) not in collected
    ]
    return replace(run, incomplete=(*run.incomplete, deleted_gap(gone))) if gone else run


def _warm_compiles_not_gating(run: Run, base: BaseMeasuredBeside) -> Run:
    """Where the base side compiled from main's artifacts, its cold compile was measured in
    another job (main's run, on a runner in another state): its compile time is reported
    beside this tree's and does not gate (identical trees read +114% there)."""
    warm = {r.key for r in base.results if r.details.build.get("compile_cache") == "hit"}
    if not warm:
        return run
    why = reason("compile_not_beside")
    out = tuple(
        replace(c, gating=False).with_reason(why)
        if c.metric == "compile_time_s" and (c.test, c.variant) in warm
        else c
        for c in run.comparisons
    )
    return replace(run, comparisons=out)


def _stored_cold_compiles(base: BaseMeasuredBeside, stored: Run | None) -> BaseMeasuredBeside:
    """The base side compiled from main's artifacts (the compile cache) has no cold compile
    of its own: its stored baseline's, measured cold by main's run, stands in (none where
    there is none: no compile-time verdict then)."""

    def hit(r: VariantResult) -> bool:
        return r.details.build.get("compile_cache") == "hit"

    if not any(hit(r) for r in base.results):
        return base
    out = []
    for r in base.results:
        kept = None if stored is None or not hit(r) else stored.result(r.test, r.variant)
        cold = None if kept is None else kept.metrics.compile_time_s
        if cold is not None:
            note = "compiled from main's artifacts: its cold compile is its stored baseline's"
            details = replace(r.details, notes=(*r.details.notes, note))
            r = replace(r, metrics=replace(r.metrics, compile_time_s=cold), details=details)
        out.append(r)
    return replace(base, results=tuple(out))


def _with_stored_context(
    run: Run, baseline: Baseline, settings: FinishSettings, messages: list[str]
) -> Run:
    """Same-job A/B: each p50 comparison's note also says how this tree compares with the
    base commit's stored baseline, when there is one: context for the reader (a stored
    baseline carries its own process's offset), never the verdict."""
    commit = baseline.commit or ""
    if baseline.unread is not None:
        messages.append(
            f"the stored baseline of {commit[:10]} was not read for context: {baseline.unread}"
        )
        return run
    stored = baseline.run
    if stored is None:
        return run
    against = {
        (c.test, c.variant): c
        for c in compare_runs(stored, run, settings.thresholds)
        if c.metric == "latency_p50_ms" and c.change_pct is not None
    }
    out = []
    for c in run.comparisons:
        ctx = against.get((c.test, c.variant)) if c.metric == "latency_p50_ms" else None
        if ctx is not None and ctx.change_pct is not None:
            c = c.with_reason(
                reason(
                    "stored_context", commit=commit[:10], change=ctx.change_pct, verdict=ctx.verdict
                )
            )
        out.append(c)
    messages.append(
        f"context: each p50 note has the change against the stored baseline of {commit[:10]}; "
        "the verdicts are the paired ones"
    )
    return replace(run, comparisons=tuple(out))


def _compare_same_job(run: Run, base: BaseMeasuredBeside, settings: FinishSettings) -> Run:
    """Paired comparison with the base measured in this job; no history noise floor."""
    base_run = Run(
        commit=base.commit,
        machine=run.machine,
        environment=base.environment,
        results=base.results,
    )
    comparisons = compare_runs(base_run, run, settings.thresholds, paired=True)
    comparisons = with_why(comparisons, base.results, run.results)
    here = {r.key for r in run.results}
    comparisons = (
        *comparisons,
        *(
            missing_row(test, variant)
            for test, variant in base.deleted
            if (test, variant) not in here
        ),
    )
    return replace(
        run,
        baseline=BaselineRef(
            commit=base.commit,
            reason=base.reason,
            environment=dict(base.environment),
            mode="ab",
            runs_in=base.runs_in,
        ),
        baseline_results=base.results,
        comparisons=comparisons,
        op_comparisons=compare_results(base.results, run.results, settings.thresholds, paired=True),
    )


def with_packages_first(run: Run, base: Run | None) -> Run:
    """Where the two sides' packages differ, each regression and improvement says first
    which of the changed packages the test ran (by the run's own record of what each test
    ran, else the base's); a test no record knows is told every change."""
    base_env = run.baseline.environment or (base.environment if base is not None else None)
    changes = package_changes(base_env or {}, run.environment)
    if not changes:
        return run
    record = run.reach or (base.reach if base is not None else None)
    shown = {c.name: f"{c.name} {c.base or 'none'} -> {c.head or 'none'}" for c in changes}
    out = []
    for c in run.comparisons:
        if c.verdict not in ("regression", "improvement"):
            out.append(c)
            continue
        footprint = None if record is None else record.tests.get(test_of(c.test))
        ran = set(shown) if footprint is None else set(shown) & footprint.distributions
        if not ran:
            out.append(c)
            continue
        words = ", ".join(shown[name] for name in sorted(ran))
        out.append(replace(c, reasons=(reason("packages_ran", changes=words), *c.reasons)))
    return replace(run, comparisons=tuple(out))


def environment_steps(run: Run, base: Run | None) -> Run:
    """Against a stored baseline measured with another driver, CUDA or GPU, a speed verdict
    is an environment step, not a code regression: each says what changed."""
    if base is None:
        return run
    changed = [
        f"{what} {old} -> {new}"
        for what, old, new in runtime_changes(base.environment, run.environment)
        if what in ("CUDA", "cuDNN", "the NVIDIA driver", "the device")
    ]
    if not changed:
        return run
    step = reason("environment_step", changes=", ".join(changed))
    out = tuple(
        c.with_reason(step) if c.verdict in ("regression", "improvement") else c
        for c in run.comparisons
    )
    return replace(run, comparisons=out)


def test_of(test: str) -> str:
    """The test function's node id of a result's test (its parameters left out)."""
    return test.partition("[")[0]
