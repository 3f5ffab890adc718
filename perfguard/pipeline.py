"""After measuring: choose the baseline, compare, write the results and the report, save.

A plain library step (no pytest): the plugin calls it at session end, and a script that
measured with `measure_model` can call it the same way.
"""

# long module: the steps after measuring in their order (baseline, compare, confirm, accept,
# write, save), read top to bottom in one place; each step's rules live in its own package

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfguard.accept import with_accepts
from perfguard.confirm import Remeasure, confirm, confirm_same_job, with_rounds
from perfguard.environment_diff import environment_differences
from perfguard.errors import PerfguardError
from perfguard.git import (
    BaselineChoice,
    GitError,
    GitState,
    explicit_baseline,
    find_baseline,
    git_state_or_refusal,
)
from perfguard.health import Health
from perfguard.records import (
    BaselineRef,
    Gap,
    RecordError,
    Run,
    RunCost,
    Selection,
    VariantResult,
    reason,
)
from perfguard.records.gaps import deleted_gap
from perfguard.records.selection import SHOWN_METRICS
from perfguard.report.outputs import keep_regressed_traces, write_reports
from perfguard.stats.bars import RUN, guard
from perfguard.stats.memory_why import memory_keys, with_memory_why
from perfguard.stats.verdicts import (
    Thresholds,
    compare_runs,
    missing_row,
    withhold_speed_verdicts,
)
from perfguard.stats.why import with_why
from perfguard.store.atomic import write_json_atomic
from perfguard.store.baselines import BaselineError, BaselineStore, Saved
from perfguard.store.history import load_history, noise_floor, with_trends
from perfguard.store.objects import ObjectStore, open_store


class PipelineError(PerfguardError):
    """A step that cannot go on; the message says what to do. Measurements are kept."""


@dataclass(frozen=True)
class FinishSettings:
    root: Path
    baseline_dir: Path | str  # a folder, or an object store's URL (`s3://bucket/prefix`)
    machine: str
    compare: str = "auto"  # "auto", "none" or a git revision
    main_branch: str = "main"
    baseline_depth: int = 50
    save: bool = False
    save_replace: bool = False  # replace HEAD's stored baseline whole instead of updating it
    # why this session's results must not be saved (interrupted, collection errors)
    unsaved_reason: str | None = None
    allow_dirty: bool = False
    report: Path | None = None
    json: Path | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    history_length: int = 20  # baselines the noise floor is learned from
    unhealthy: str = "warn"  # "inconclusive": health warnings withhold speed verdicts
    confirm: int = 1  # re-measures a latency verdict must survive
    traces: Path | None = None  # the Chrome traces' folder: only the regressions' are kept
    # how the caller's options are spelled in messages: the plugin's `--perfguard-compare`,
    # `perfguard merge`'s `--compare`
    option_prefix: str = "--perfguard-"


@dataclass(frozen=True)
class BaseMeasuredBeside:
    """Same-job A/B: the base revision's results, measured in this job beside ours."""

    commit: str
    reason: str
    results: tuple[VariantResult, ...]
    environment: Mapping[str, Any]
    deleted: tuple[tuple[str, str], ...] = ()  # (test, variant) the base has, this tree not
    thresholds: Thresholds | None = None  # the base tree's own (its markers), when known


@dataclass(frozen=True)
class PipelineOutcome:
    run: Run
    report_path: Path | None
    json_path: Path | None
    saved_path: Path | str | None  # a file, or an object store URL
    messages: tuple[str, ...]
    error: str | None = None  # the comparison or the save could not be done


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
    settings: FinishSettings, state: GitState | None, store: BaselineStore | ObjectStore
) -> BaselineChoice:
    if settings.compare == "none":
        return BaselineChoice(None, f"comparison disabled ({settings.option_prefix}compare=none)")
    if state is None:
        return BaselineChoice(
            None,
            "not compared: not inside a git repository, so there is no "
            "commit to find a baseline for",
        )

    def has(sha: str) -> bool:
        return store.has(settings.machine, sha)

    if settings.compare == "auto":
        return find_baseline(
            settings.root, has, main_branch=settings.main_branch, depth=settings.baseline_depth
        )
    try:
        flag = f"{settings.option_prefix}compare"
        return explicit_baseline(settings.root, settings.compare, has, flag)
    except GitError as exc:
        raise PipelineError(f"{flag}: {exc}") from None


def finish_run(
    results: Sequence[VariantResult],
    environment: Mapping[str, Any],
    settings: FinishSettings,
    *,
    extra_settings: Mapping[str, Any] | None = None,
    health: Health | None = None,
    same_job: BaseMeasuredBeside | None = None,
    remeasure: Remeasure | None = None,
    started: float | None = None,
    cost: RunCost | None = None,
    incomplete: Sequence[Gap] = (),
    collected: frozenset[tuple[str, str]] | None = None,
    selection: Selection | None = None,
    explain: Remeasure | None = None,
) -> PipelineOutcome:
    """Compare, write and save. Results are always written, even when comparing fails.
    `incomplete`: what the session was asked to measure and did not (the run fails on it).
    `collected`: every (test, variant) of this tree, before any selection: a stored baseline's
    test outside it was deleted or renamed, a gap of the run (one deselected is not).

    `same_job`: compare with the base measured in this job (paired), not a stored baseline.
    `remeasure`: how to measure flagged items again, `settings.confirm` times, before their
    latency verdicts stand (None: no confirming). Against a stored baseline, beside the base
    commit when the checkout has it, else in a fresh process; in same-job A/B, beside the
    base commit again, in a fresh pair of processes.
    `started`: the `time.monotonic()` when measuring began: the run's cost is measured from
    it; `cost`: a cost already known (merged shards), kept as it is.
    `selection`: a pull request's partial run: its unaffected items are listed with the
    base's stored figures, never compared (not `missing`).
    `explain`: how to measure an item once more in both trees with allocation recording,
    for the memory verdicts that stand ("where the memory went"); None: not asked.
    """
    finishing = time.monotonic()
    state, refused = git_state_or_refusal(settings.root)  # a refusal is said below
    store = open_store(settings.baseline_dir)
    error: str | None = None
    run = _new_run(
        state, results, environment, settings, extra_settings, health, remeasure, incomplete
    )
    messages = [f"runner health: {warning}" for warning in run.health_warnings]
    if selection is not None:
        run = replace(run, selection=_with_base_figures(selection, store, settings.machine))
    try:
        if refused is not None:
            raise refused
        if same_job is not None:
            settings, run = _guard_bars(settings, run, same_job.thresholds, messages)
            run = _compare_beside(run, same_job, settings, store, messages, remeasure)
        else:
            settings, run = _compare_stored(run, settings, state, store, messages, remeasure)
        run = _without_unaffected(run)
        if collected is not None:
            run = _with_deleted(run, collected)
        if settings.unhealthy == "inconclusive" and run.health_warnings:
            unhealthy = reason("runner_health", warnings="; ".join(run.health_warnings))
            withheld = withhold_speed_verdicts(run.comparisons, unhealthy)
            run = replace(run, comparisons=withheld)
        run = with_accepts(run, settings.root, messages)
        run = _explain_memory(run, explain, messages)
    except (BaselineError, PipelineError, GitError) as exc:
        error = f"comparison stopped: {exc}"
        run = replace(run, baseline=BaselineRef(commit=None, reason=error))
    if cost is None and started is not None:
        cost = RunCost.between(started, finishing, time.monotonic(), len(run.results))
    run = replace(run, cost=cost)

    if settings.traces is not None and settings.compare != "none" and error is None:
        keep_regressed_traces(run, settings.traces)
    failures: list[str] = [] if error is None else [error]
    if run.accept_error:  # never a silent pass: the check fails, the report says why
        failures.append(f"nothing accepted: {run.accept_error}")
    json_path = _write(settings.json, lambda p: write_json_atomic(p, run.to_json()), failures)

    def report(path: Path) -> None:
        written = write_reports(run, path, Thresholds.from_json(run.settings.get("thresholds")))
        if written.full is not None:
            messages.append(
                f"the report was trimmed to fit a GitHub comment; full report: {written.full}"
            )

    report_path = _write(settings.report, report, failures)
    saved = None
    if settings.save:
        saved = _save(run, settings, state, store, messages, failures, error is not None)
    error = "; ".join(failures) or None
    return PipelineOutcome(run, report_path, json_path, saved, tuple(messages), error)


def _explain_memory(run: Run, explain: Remeasure | None, messages: list[str]) -> Run:
    """Each standing memory verdict with the allocation sites that changed most: its item
    measured once more in both trees (beside the base commit where the checkout has it),
    one recorded call each."""
    keys = memory_keys(run.comparisons)
    if explain is None or not keys:
        return run
    made = explain(keys, run.baseline.commit, ())
    head = {r.key: r for r in made.results if r.status == "ok"}
    base = {r.key: r for r in made.base_results if r.status == "ok"}
    if head and not base:
        messages.append(
            "allocation sites: the base commit's tree is not in this checkout, so only this "
            "tree's sites are shown (each as new)"
        )
    return replace(run, comparisons=with_memory_why(run.comparisons, base, head))


def _with_base_figures(
    selection: Selection, store: BaselineStore | ObjectStore, machine: str
) -> Selection:
    """The unaffected items with the base's stored figures, where it has a readable record."""
    if not selection.unaffected or selection.base is None:
        return selection
    try:
        base = store.load(machine, selection.base)
    except BaselineError:  # the comparison says so where it reads it
        base = None
    if base is None:
        return selection
    listed = []
    for u in selection.unaffected:
        r = base.result(u.test, u.variant)
        figures = {} if r is None else {m: getattr(r.metrics, m) for m in SHOWN_METRICS}
        listed.append(replace(u, baseline={k: v for k, v in figures.items() if v is not None}))
    return replace(selection, unaffected=tuple(listed))


def _without_unaffected(run: Run) -> Run:
    """A partial run's unaffected items are not `missing`: they were left out on purpose."""
    if run.selection is None or not run.selection.unaffected:
        return run
    left = {(u.test, u.variant) for u in run.selection.unaffected}
    kept = [
        c for c in run.comparisons if not (c.verdict == "missing" and (c.test, c.variant) in left)
    ]
    return replace(run, comparisons=tuple(kept))


def _with_deleted(run: Run, collected: frozenset[tuple[str, str]]) -> Run:
    """The run with a gap for the baseline's perf tests this tree no longer has at all."""
    gone = [
        (c.test, c.variant)
        for c in run.comparisons
        if c.verdict == "missing" and (c.test, c.variant) not in collected
    ]
    return replace(run, incomplete=(*run.incomplete, deleted_gap(gone))) if gone else run


def _new_run(
    state: GitState | None,
    results: Sequence[VariantResult],
    environment: Mapping[str, Any],
    settings: FinishSettings,
    extra_settings: Mapping[str, Any] | None,
    health: Health | None,
    remeasure: Remeasure | None,
    incomplete: Sequence[Gap],
) -> Run:
    """The run as measured, before any comparison."""
    return Run(
        commit=state.head if state else None,
        machine=settings.machine,
        environment=environment,
        results=tuple(results),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        settings={
            "thresholds": settings.thresholds.to_json(),
            **(extra_settings or {}),
            # how many re-measures a flagged latency verdict had to survive (0: none)
            "confirm": settings.confirm if remeasure else 0,
        },
        health={} if health is None else health.to_json(),
        incomplete=tuple(incomplete),
    )


def _compare_beside(
    run: Run,
    same_job: BaseMeasuredBeside,
    settings: FinishSettings,
    store: BaselineStore | ObjectStore,
    messages: list[str],
    remeasure: Remeasure | None,
) -> Run:
    """Same-job A/B: compare with the base measured in this job, confirm, add the stored
    baselines' context."""
    same_job = _stored_cold_compiles(same_job, store, settings.machine)
    run = _compare_same_job(run, same_job, settings)
    messages.append(f"baseline: {same_job.commit[:10]} ({same_job.reason})")
    if remeasure is not None and settings.confirm > 0:
        run = confirm_same_job(
            run, same_job.commit, remeasure, settings.confirm, settings.thresholds, messages
        )
    return _with_stored_context(run, same_job.commit, settings, store, messages)


def _stored_cold_compiles(
    base: BaseMeasuredBeside, store: BaselineStore | ObjectStore, machine: str
) -> BaseMeasuredBeside:
    """The base side compiled from main's artifacts (the compile cache) has no cold compile
    of its own: its stored baseline's, measured cold by main's run, stands in (none where
    there is none: no compile-time verdict then)."""

    def hit(r: VariantResult) -> bool:
        return r.details.build.get("compile_cache") == "hit"

    if not any(hit(r) for r in base.results):
        return base
    try:
        stored = store.load(machine, base.commit)
    except BaselineError:
        stored = None
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


def _write(path: Path | None, write: Callable[[Path], None], failures: list[str]) -> Path | None:
    """Write one output; a full disk or an unwritable folder is a failure line, not a crash."""
    if path is None:
        return None
    try:
        write(path)
    except OSError as exc:
        failures.append(_unwritable(path, exc))
        return None
    return path


def _save(
    run: Run,
    settings: FinishSettings,
    state: GitState | None,
    store: BaselineStore | ObjectStore,
    messages: list[str],
    failures: list[str],
    comparing_failed: bool,
) -> Path | str | None:
    """Store the run as HEAD's baseline, unless it must not be (said in `messages`)."""
    refusal = _save_refusal(run, settings, comparing_failed=comparing_failed)
    if refusal:
        messages.append(f"baseline not saved: {refusal}")
        return None
    unsafe = check_can_save(state, settings.allow_dirty, settings.option_prefix)
    if unsafe is not None:
        failures.append(unsafe)
        return None
    try:
        done = store.save(
            replace(run, baseline_results=(), confirm_results=(), confirm_base_results=()),
            replace_all=settings.save_replace,
        )
    except BaselineError as exc:
        failures.append(f"baseline not saved: {exc}")
        return None
    except OSError as exc:
        failures.append(f"baseline not saved: {_unwritable(settings.baseline_dir, exc)}")
        return None
    messages.append(_saved_message(done))
    return done.path


def _save_refusal(run: Run, settings: FinishSettings, *, comparing_failed: bool) -> str | None:
    """Why this run is not stored as HEAD's baseline (a note, not an error), or None."""
    if settings.unsaved_reason:
        return f"{settings.unsaved_reason}; the stored baseline is unchanged"
    if not run.results:
        return "nothing was measured (no perf item ran); the stored baseline is unchanged"
    if run.selection is not None and run.selection.partial:
        return "a partial run (a pull request's) is no commit's baseline"
    if comparing_failed:
        return "the comparison stopped (above); fix that and save again"
    return None


def _saved_message(done: Saved) -> str:
    if done.kept:
        return (
            f"updated baseline {done.path}: {done.measured} result(s) measured, "
            f"{done.kept} kept from the earlier save"
        )
    return f"saved baseline {done.path}" + (" (replacing the earlier save)" if done.updated else "")


def _unwritable(path: Path | str | None, exc: OSError) -> str:
    """One line naming what was written (an fsync that fails on a full disk names no file)."""
    where = path or exc.filename
    return f"could not write {where}: {exc.strerror or exc}"


def _guard_bars(
    settings: FinishSettings, run: Run, base: Thresholds | None, messages: list[str]
) -> tuple[FinishSettings, Run]:
    """The thresholds this run is judged by: its own, but none looser than the base
    commit's (`perfguard.stats.bars`); what was put back is recorded and said."""
    guarded, loosened = guard(settings.thresholds, base)
    if not loosened:
        return settings, run
    for item in loosened:
        where = "the run" if item.test == RUN else item.test
        messages.append(
            f"{where}: {item.rule} {item.head} is looser than the base commit's {item.base}: "
            "judged by the base's (a slower change is accepted in perfguard-accept.toml)"
        )
    recorded = {
        **run.settings,
        "thresholds": guarded.to_json(),
        "loosened": [item.to_json() for item in loosened],
    }
    return replace(settings, thresholds=guarded), replace(run, settings=recorded)


def _compare_stored(
    run: Run,
    settings: FinishSettings,
    state: GitState | None,
    store: BaselineStore | ObjectStore,
    messages: list[str],
    remeasure: Remeasure | None = None,
) -> tuple[FinishSettings, Run]:
    """Find the stored baseline, learn the noise floor from history, compare, confirm (by
    thresholds none looser than the baseline's)."""
    choice = choose_baseline(settings, state, store)
    base = store.load(settings.machine, choice.commit) if choice.commit else None
    if base is not None and base.settings.get("thresholds") is not None:
        try:
            theirs = Thresholds.from_json(base.settings["thresholds"])
        except RecordError as exc:
            raise PipelineError(f"the baseline of {choice.commit}: {exc}") from None
        settings, run = _guard_bars(settings, run, theirs, messages)
    run = replace(
        run,
        baseline=BaselineRef(
            commit=choice.commit,
            reason=choice.reason,
            environment=None if base is None else base.environment,
        ),
    )
    messages.append(
        f"baseline: {choice.commit[:10] if choice.commit else 'none'} ({choice.reason})"
    )
    noise: dict[tuple[str, str, str], float] = {}
    history = None
    if base is not None and choice.commit is not None:
        diffs = environment_differences(base.environment, run.environment)
        messages.extend(f"environment changed: {d}" for d in diffs)
        history = load_history(
            store,
            settings.machine,
            settings.root,
            start=choice.commit,
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
                choice.commit,
                settings.confirm,
                settings.thresholds,
                noise,
                messages,
            )
            run = with_rounds(run, rounds)
        if history is not None:
            comparisons = with_trends(comparisons, history)
        if base is not None:
            comparisons = with_why(comparisons, base.results, run.results)
        run = replace(run, comparisons=comparisons)
    return settings, run


def _with_stored_context(
    run: Run,
    commit: str,
    settings: FinishSettings,
    store: BaselineStore | ObjectStore,
    messages: list[str],
) -> Run:
    """Same-job A/B: each p50 comparison's note also says how this tree compares with the
    base commit's stored baseline, when there is one: context for the reader (a stored
    baseline carries its own process's offset), never the verdict."""
    try:
        stored = store.load(settings.machine, commit)
    except BaselineError as exc:
        messages.append(f"the stored baseline of {commit[:10]} was not read for context: {exc}")
        return run
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
            commit=base.commit, reason=base.reason, environment=dict(base.environment), mode="ab"
        ),
        baseline_results=base.results,
        comparisons=comparisons,
    )
