"""What the steps after measuring take and give: the settings, what was measured, the steps
a caller lends them (measuring again), and the outcome."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.errors import PerfguardError
from perfguard.records import Gap, Run, RunCost, Selection, VariantResult
from perfguard.records.reach import Reach
from perfguard.stats.thresholds import Thresholds

if TYPE_CHECKING:
    from perfguard.confirm import Remeasure
    from perfguard.health import Health


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
    fail_on: str = "regression"  # "never": a regression does not fail the run (the caller's)
    # the guarded settings the caller gave on its command line (the workflow's, not the
    # tree's): a change of the tree cannot have loosened them (`perfguard.stats.bars`)
    given: frozenset[str] = frozenset()
    # why the run compares with nothing when the caller, not the user, decided it (an A/B
    # run that measured nothing); "" where `compare` is the user's "none"
    why_not_compared: str = ""
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
    settings: Mapping[str, Any] | None = None  # the base tree's recorded settings, when known
    runs_in: Mapping[str, Any] | None = None  # the environment the base side ran in


@dataclass(frozen=True)
class Measured:
    """What a session (or a merge of shards) measured, as the pipeline takes it.

    `incomplete`: what it was asked to measure and did not (the run fails on it).
    `collected`: every (test, variant) of this tree, before any selection: a stored baseline's
    test outside it was deleted or renamed, a gap of the run (one deselected is not).
    `same_job`: the base measured in this job (paired), not a stored baseline.
    `started`: the `time.monotonic()` when measuring began: the run's cost is measured from
    it; `cost`: a cost already known (merged shards), kept as it is.
    `selection`: a pull request's partial run: its unaffected items are listed with the
    base's stored figures, never compared (not `missing`).
    `reach`: what each perf test ran (a full run's record), stored with the baseline.
    """

    results: Sequence[VariantResult]
    environment: Mapping[str, Any]
    extra_settings: Mapping[str, Any] | None = None
    health: Health | None = None
    same_job: BaseMeasuredBeside | None = None
    started: float | None = None
    cost: RunCost | None = None
    incomplete: Sequence[Gap] = ()
    collected: frozenset[tuple[str, str]] | None = None
    selection: Selection | None = None
    reach: Reach | None = None
    suite: frozenset[str] = frozenset()  # every perf test of the tree, before -k and shards


@dataclass(frozen=True)
class Steps:
    """What the caller lends the pipeline to measure again.

    `remeasure`: how to measure flagged items again, `FinishSettings.confirm` times, before
    their latency verdicts stand (None: no confirming). Against a stored baseline, beside the
    base commit when the checkout has it, else in a fresh process; in same-job A/B, beside the
    base commit again, in a fresh pair of processes.
    `explain`: how to measure an item once more in both trees with allocation recording, for
    the memory verdicts that stand ("where the memory went"); None: not asked.
    """

    remeasure: Remeasure | None = None
    explain: Remeasure | None = None


@dataclass(frozen=True)
class PipelineOutcome:
    run: Run
    report_path: Path | None
    json_path: Path | None
    saved_path: Path | str | None  # a file, or an object store URL
    messages: tuple[str, ...]
    error: str | None = None  # the comparison or the save could not be done
