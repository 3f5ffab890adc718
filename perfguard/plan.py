"""A measuring session's plan: what it decides before it measures, made once, right after
collection, into one frozen value.

The plan holds the merged settings of the run (the pipeline's `FinishSettings`, with the
machine key and the verdict rules of the options and markers), each perf test's merged
settings, the `Baseline` (the commit compared with, chosen once, its stored record read
once), the settings floors (what this tree loosened against the base and was put back) and
a pull request's selection (which perf items the change can affect). The plugin makes it
from its options and its collected items and reads it from then on: the fixture (an item's
floor), the time limit (an item's settings), the A/B driver (the rules of each item's
design) and the finish (the settings, the baseline, the selection); nothing resolves any of
it again. Nothing here imports pytest: a session of the library, a benchmark or a test makes
a plan from plain values.

In same-job A/B the base is the commit measured beside this tree, and the base tree's own
rules and guarded settings are what its worker said when it connected (`BaseSaid`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.environment import machine_key
from perfguard.git import GitError, GitState, file_at, resolve_commit
from perfguard.pipeline import Baseline, FinishSettings, resolve_baseline
from perfguard.records import Selection, Unaffected
from perfguard.settings import BY_FIELD, SETTINGS, ItemSettings
from perfguard.stats.bars import Loosened, floors, guard, read_guarded
from perfguard.stats.thresholds import Thresholds
from perfguard.store.baselines import BaselineStore
from perfguard.store.objects import ObjectStore

if TYPE_CHECKING:
    from perfguard.selection import Decision


@dataclass(frozen=True)
class PerfItem:
    """A collected perf item as the plan sees it."""

    nodeid: str
    test: str  # the test function's node id (`ItemSettings.test`)
    result: str  # the results' `test` of it (the node id without the variant)
    variant: str
    path: Path  # its module's file


@dataclass(frozen=True)
class Asked:
    """What the session's options ask of its plan, read by the plugin (pytest's options,
    the ini, the event that started the run) and handed over as values."""

    settings: FinishSettings  # `machine` "": derived from the environment
    guarded_run: Mapping[str, Any]  # the run's values of the guarded settings
    from_command_line: frozenset[str]  # guarded settings the invoker gave on its command line
    rules: Mapping[str, Any]  # the verdict rules the options set, by marker key
    why_full: str = ""  # why this run measures everything ("": it may select)
    depends: tuple[str, ...] = ()  # globs every perf test reads (ini `perfguard_depends`)

    def from_the_invoker(self, base: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """`base`'s run-level guarded settings, but for those this session took from its
        command line, which are this session's: the line is the invoker's (the workflow's),
        which a change of the tree does not write, and both trees of an A/B run take it."""
        if base is None:
            return None
        return {
            k: self.guarded_run.get(k, v) if k in self.from_command_line else v
            for k, v in base.items()
            if k in BY_FIELD
        }


@dataclass(frozen=True)
class BaseSaid:
    """Same-job A/B: the base commit measured beside this tree, and its tree's own rules and
    guarded settings as its worker read them (None: it did not say)."""

    commit: str
    reason: str
    thresholds: Thresholds | None = None
    settings: Mapping[str, Any] | None = None  # {"run": {...}, "tests": {test: {...}}}
    tests: frozenset[str] = frozenset()  # the base tree's perf tests (test function ids)


@dataclass(frozen=True)
class Plan:
    """See the module's docstring."""

    settings: FinishSettings
    environment: Mapping[str, Any]  # what the machine key was read from
    items: Mapping[str, ItemSettings] = field(default_factory=dict)  # by test
    baseline: Baseline | None = None  # None: the run compares with nothing
    # test -> the item settings put back to the base's where this tree loosened them
    floors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    loosened: tuple[Loosened, ...] = ()
    selection: Selection | None = None
    keep: frozenset[str] | None = None  # the perf items to measure (None: every one)
    # the rules an item's A/B design decides by: the run's, none looser than the base tree's
    judged: Thresholds | None = None
    # A/B: the base tree's run-level guarded settings as its worker said them, but for those
    # the invoker gave on the command line (`Asked.from_the_invoker`)
    base_run: Mapping[str, Any] | None = None

    @property
    def thresholds(self) -> Thresholds:
        return self.settings.thresholds

    @property
    def machine(self) -> str:
        return self.settings.machine

    def floor(self, test: str) -> dict[str, Any]:
        """The item settings `test` is measured with where this tree loosened the base's."""
        return dict(self.floors.get(test, {}))

    def rules_for(self, test: str) -> Thresholds:
        """The rules `test`'s verdict is decided by while it is measured (A/B's design)."""
        return (self.judged or self.thresholds).for_test(test)

    def guarded(self, run: Mapping[str, Any]) -> dict[str, Any]:
        """The guarded settings this session measures by: the run's (`run`) and each test's
        marker's; recorded with the results, what the next change to them is judged
        against."""
        return {"run": dict(run), "tests": guarded_tests(self.items)}


def guarded_tests(items: Mapping[str, ItemSettings]) -> dict[str, dict[str, Any]]:
    """Each test's marker values of the guarded item settings (tests without any left out)."""
    tests = {test: s.marker.guarded for test, s in items.items()}
    return {t: v for t, v in tests.items() if v}


def thresholds_of(rules: Mapping[str, Any], items: Mapping[str, ItemSettings]) -> Thresholds:
    """The verdict rules the options (`rules`, by marker key) and each test's marker set."""
    per_test = {t: s.marker.thresholds for t, s in items.items()}
    return Thresholds(**rules, per_test={t: v for t, v in per_test.items() if v})


def option_rules(values: Callable[[str], Any]) -> dict[str, Any]:
    """Each verdict rule that has an option, by its marker key, as `values(field)` gives it."""
    return {s.marker: values(s.field) for s in SETTINGS if s.threshold and s.flag and s.marker}


@dataclass(frozen=True)
class Sources:
    """Where the plan reads what it needs beyond the session: git (None: not a checkout)
    and the baseline store (None: nothing to read)."""

    git: GitState | None
    store: BaselineStore | ObjectStore | None


def make_plan(
    asked: Asked,
    environment: Mapping[str, Any],
    items: Mapping[str, ItemSettings],
    perf: tuple[PerfItem, ...],
    sources: Sources,
    *,
    beside: BaseSaid | None = None,
    nothing_to_compare: str = "",
) -> Plan:
    """The session's plan (see the module's docstring). `perf`: the perf items collected,
    after `-k` and `-m` chose; `beside`: same-job A/B's base; `nothing_to_compare`: why an
    A/B run compares with nothing (it has no perf item to measure)."""
    settings = asked.settings
    settings = replace(
        settings,
        machine=settings.machine or machine_key(environment),
        thresholds=thresholds_of(asked.rules, items),
    )
    if nothing_to_compare:
        settings = replace(settings, compare="none", why_not_compared=nothing_to_compare)
    plan = Plan(settings, environment, items)
    if settings.compare == "none" and beside is None:
        return plan
    baseline = resolve_baseline(
        settings,
        sources.git,
        sources.store,
        environment,
        beside=None if beside is None else (beside.commit, beside.reason),
    )
    plan = replace(plan, baseline=baseline)
    plan = _with_floors(plan, asked, beside, {p.test for p in perf})
    return _with_selection(plan, asked, perf, beside)


def _with_floors(plan: Plan, asked: Asked, beside: BaseSaid | None, perf: set[str]) -> Plan:
    """The floors of the perf tests: where this tree loosened the base's item settings, the
    base's (its stored record's, or in A/B what its tree's worker said), and the verdict
    rules of A/B's design, none looser than the base tree's."""
    if beside is not None:
        said = read_guarded(beside.settings)
        present = beside.tests
        judged, _ = guard(plan.thresholds, beside.thresholds)
        run = (beside.settings or {}).get("run")
        base_run = asked.from_the_invoker(run if isinstance(run, Mapping) else None)
        plan = replace(plan, judged=judged, base_run=base_run)
    else:
        baseline = plan.baseline
        if baseline is None or not baseline.usable or baseline.run is None:
            return plan
        said = read_guarded(baseline.run.settings.get("guarded"))
        present = frozenset(r.test.partition("[")[0] for r in baseline.run.results)
    if said is None or not perf:
        return plan
    base_run, base_tests = said
    mine = guarded_tests(plan.items)
    found, loosened = floors(
        asked.guarded_run,
        {t: mine.get(t, {}) for t in sorted(perf)},
        asked.from_the_invoker(base_run) or {},
        {t: base_tests.get(t, {}) for t in present},
    )
    return replace(plan, floors=found, loosened=loosened)


def _with_selection(
    plan: Plan, asked: Asked, perf: tuple[PerfItem, ...], beside: BaseSaid | None
) -> Plan:
    """A pull request's selection: the perf items its change can affect, judged against the
    base's record of what each test ran."""
    if not perf:
        return plan
    if asked.why_full:
        return replace(plan, selection=Selection(partial=False, reason=asked.why_full))
    baseline = plan.baseline
    if baseline is None or baseline.commit is None:
        return plan  # every item is new: nothing to leave out (or the comparison says why not)
    base = baseline.commit
    root = plan.settings.root
    if baseline.differences:
        return replace(
            plan,
            selection=Selection(
                partial=False,
                reason=f"the environment differs from the record of {base[:10]} "
                f"({baseline.differences[0]}): every perf item measured",
            ),
        )
    decision = _decide(root, asked, perf, baseline, plan.items)
    if decision is not None and not decision.changed and _is_head(root, base):
        # the base is this very commit (a noise check, or the same code measured twice): a
        # partial run would measure nothing
        selection = Selection(
            partial=False, reason="the base is HEAD itself: every perf item measured", base=base
        )
        return replace(plan, selection=selection)
    if decision is None or decision.full:
        reason = "the change could not be read" if decision is None else decision.reason
        changed = () if decision is None else decision.changed
        selection = Selection(
            partial=False, reason=reason, base=base, changed=changed, changed_count=len(changed)
        )
        return replace(plan, selection=selection)
    dropped = [p for p in perf if p.test not in decision.affected]
    selection = Selection(
        partial=bool(dropped),
        reason=decision.reason,
        base=base,
        changed=decision.changed,
        changed_count=len(decision.changed),
        unaffected=tuple(
            Unaffected(test=p.result, variant=p.variant, baseline={}) for p in dropped
        ),
        reached={p.result: decision.reached[p.test] for p in perf if p.test in decision.reached},
    )
    gone = {p.nodeid for p in dropped}
    keep = frozenset(p.nodeid for p in perf if p.nodeid not in gone)
    return replace(plan, selection=selection, keep=keep if dropped else None)


def _is_head(root: Path, base: str) -> bool:
    try:
        return resolve_commit(root, "HEAD") == base
    except GitError:
        return False


def _decide(
    root: Path,
    asked: Asked,
    perf: tuple[PerfItem, ...],
    baseline: Baseline,
    items: Mapping[str, ItemSettings],
) -> Decision | None:
    from perfguard.selection import PerfTest, changed_files, decide

    assert baseline.commit is not None
    base = baseline.commit
    tests = {
        p.test: PerfTest(p.path, items[p.test].depends if p.test in items else ()) for p in perf
    }
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
            every_test=asked.depends,
            before=before,
        )
    except GitError:  # the changes cannot be listed: everything is measured
        return None
