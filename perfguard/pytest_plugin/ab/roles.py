"""The role of same-job A/B's driving session, the one the user started (`AbDriving`: it
collects, plans and compares, and has the workers run each perf item); each tree's worker's
is `AbWorker` (`ab/worker.py`)."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.orders import Orders
from perfguard.pytest_plugin import planning
from perfguard.pytest_plugin.ab import session as ab_session
from perfguard.pytest_plugin.collection import (
    measured_in_ab,
    test_id,
    test_of,
    times_itself,
    variant_of,
)
from perfguard.pytest_plugin.finish import Ending
from perfguard.pytest_plugin.roles import (
    Measuring,
    keep_shard,
    no_cuda,
)
from perfguard.pytest_plugin.state import SessionState
from perfguard.pytest_plugin.timeout import limit_of

if TYPE_CHECKING:
    from perfguard.pipeline import BaseMeasuredBeside
    from perfguard.plan import BaseSaid
    from perfguard.pytest_plugin.ab.session import AbSession
    from perfguard.pytest_plugin.recording import Recording
    from perfguard.records.reach import Reach
    from perfguard.watchdog import Watchdog


class AbDriving(Measuring):
    """`--perfguard-ab`: the workers run each perf item, the base's and this tree's,
    interleaved; this session drives them and compares the pairs."""

    def __init__(
        self,
        state: SessionState,
        recording: Recording | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        super().__init__(state, recording, watchdog)
        self.ab: AbSession | None = None  # the base's worktree and both workers
        self.records = recording is not None  # this tree's worker records what each test ran
        self.reach: Reach | None = None  # ... read from it when the workers stop

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The workers start now, before this session collects: importing torch and
        collecting the suite take seconds, in each of the three processes at once. (Where a
        test path lies outside the rootdir, they start once this session has collected.)"""
        config = session.config
        paths = ab_session.session_paths(config)
        if paths is None or config.option.collectonly:
            return
        self.ab = self.start_ab(Path(config.rootpath), None, paths)

    def start_ab(self, root: Path, items: list[str] | None, paths: Sequence[str] = ()) -> AbSession:
        return ab_session.start(
            root,
            self.state.options,
            items,
            paths,
            record=self.records,
            say=self.state.progress.note,
        )

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """The plan, with the base tree as its worker describes it (its rules, its guarded
        settings, its perf tests) and this tree's environment as its worker measures on it;
        then the shard."""
        nodeids = [i.nodeid for i in items if measured_in_ab(i)]
        if nodeids and self.ab is None and not config.option.collectonly:
            # a test path outside the rootdir: the workers start now, with the items
            self.ab = self.start_ab(Path(config.rootpath), nodeids)
        beside, environment = None, None
        if self.ab is not None and nodeids:
            self.ab.driver.connect(nodeids, self.state.progress.note)
            beside = self.base_said(self.ab)
            environment = self.ab.driver.b.environment
        planning.make(
            self.state,
            config,
            items,
            environment,
            beside=beside,
            nothing_to_compare=self.nothing_to_compare(items),
        )
        keep_shard(self.state, config, items)

    def base_said(self, ab: AbSession) -> BaseSaid | None:
        """The base commit, and its tree as its worker described it when it connected."""
        from perfguard.plan import BaseSaid

        base = ab.driver.a
        return BaseSaid(
            ab.commit,
            ab.reason,
            thresholds=ab_session.base_thresholds(ab),
            settings=base.settings,
            tests=frozenset(test_of(nodeid) for nodeid in base.collected),
        )

    def nothing_to_compare(self, items: list[pytest.Item]) -> str:
        """Why this run compares with nothing: it has no perf item to measure ("": it has)."""
        if any(measured_in_ab(i) for i in items) and self.ab is not None:
            return ""
        collection = self.state.tally.collection
        why = (
            f"{len(collection)} test module(s) of this tree did not collect ({collection[0][0]}: "
            f"{collection[0][1]})"
            if collection
            else "this tree has no perf item to measure (none collected, or none selected)"
        )
        return f"not compared: {why}"

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        ab = self.ab
        if ab is not None and not any(measured_in_ab(i) for i in session.items):
            self.ab = None  # nothing for the workers to run
            ab.close()
        super().pytest_collection_finish(session)

    def start(self, session: pytest.Session) -> None:
        perf_items = [i.nodeid for i in session.items if measured_in_ab(i)]
        if perf_items and self.ab is not None:
            self.ab.items = perf_items  # sent to the workers when they are connected
        super().start(session)

    def cuda_available(self) -> bool:
        """Asked of the workers, which import torch anyway: this session measures nothing
        and need not import it (1-2 s of CPU while both workers start)."""
        ab = self.ab
        if ab is not None:
            ab.driver.connect(ab.items, self.state.progress.note)
            if (cuda := ab.driver.cuda) is not None:
                return cuda
        return super().cuda_available()

    def check_cuda(self, device: str) -> None:
        """As the workers see it (which CUDA device each has is theirs to say, per item)."""
        if not self.cuda_available():
            if self.ab is not None:
                self.ab.close(interrupted=True)
                self.ab = None
            raise pytest.UsageError(no_cuda(device))

    def check_device(self) -> None:
        from perfguard.health import EXCLUSIVE_ADVICE

        if self.ab is not None and self.exclusive_gpu:
            self.ab.close(interrupted=True)
            self.ab = None
            raise pytest.UsageError(f"--perfguard-ab: {EXCLUSIVE_ADVICE}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        """The workers run the perf test (or the test that times itself); this session does
        not."""
        variant = variant_of(pyfuncitem)
        bench = getattr(pyfuncitem, "funcargs", {}).get("benchmark")
        if self.ab is not None and bench is not None:
            # its workers run it: pytest-benchmark must not say "fixture was not used" here
            bench._mode = "run in both trees by perfguard's A/B workers"
        if self.ab is not None and times_itself(pyfuncitem):
            self.run_whole(self.ab, pyfuncitem)
            return True
        if self.ab is None or variant is None:
            return None
        limit = limit_of(pyfuncitem, self.state.options.timeout_s)
        test = test_id(pyfuncitem, variant)
        self.run_item(self.ab, pyfuncitem.nodeid, test, variant, limit)
        return True

    def run_whole(self, ab: AbSession, item: pytest.Item) -> None:
        """A test that times itself (pytest-benchmark) in both trees, whole, one after the
        other; its timings recorded as variant `pytest-benchmark`, compared unpaired."""
        nodeid = item.nodeid
        position = ab.items.index(nodeid) if nodeid in ab.items else 0
        self.state.progress.start(nodeid)
        base, head = ab.driver.measure_whole(
            nodeid, ab.items[position:], self.state.progress, limit_s=self.state.options.timeout_s
        )
        if base.result is not None:
            ab.base_results = [r for r in ab.base_results if r.key != base.result.key]
            ab.base_results.append(base.result)
        elif base.outcome in ("failed", "crashed") and head.result is not None:
            self.state.tally.base_errors[nodeid] = base.message or base.outcome
        if head.result is not None:
            self.state.record(head.result, nodeid)
        if head.outcome == "passed":
            return
        if head.outcome == "skipped":
            pytest.skip(head.message)
        pytest.fail(f"{head.message or head.outcome} (this tree's A/B worker)", pytrace=False)

    def run_item(
        self, ab: AbSession, nodeid: str, test: str, variant: str, limit: float | None = None
    ) -> None:
        """Measure one perf item in both trees; this item passes or fails as the head's does."""
        from perfguard.pytest_plugin.ab.driver import Design
        from perfguard.stats.latency import ab_bar
        from perfguard.stats.verdicts import LATENCY_METRICS

        state = self.state
        state.progress.start(nodeid)
        position = ab.items.index(nodeid) if nodeid in ab.items else 0
        plan = state.planned
        th = plan.rules_for(test)
        # the run's correction shares each p-value with every latency comparison of the run
        tests = max(len(ab.items), 1) * len(LATENCY_METRICS)
        # the stop waits for the median alone (`perfguard.stats.sequential.METRICS`)
        design = Design(
            alpha=th.alpha,
            bar_pct=ab_bar("latency_p50_ms", th),
            tests=tests,
            margin_pct=th.min_change_pct,
        )
        ab.driver.connect(ab.items[position:], state.progress)
        floor = plan.floor(test_of(nodeid)) or None
        base, head, pairing = ab.driver.measure(
            nodeid, ab.items[position:], state.progress, design, limit_s=limit, floor=floor
        )
        if (
            limit is not None
            and head.outcome in ("failed", "crashed")
            and "time limit" in (head.message)
        ):
            state.tally.timed_out[nodeid] = limit
        base_result = ab_session.base_result(base, test, variant)
        if base_result is not None and base_result.status == "error" and head.result is not None:
            # the base had the item and could not measure it: not `new`, a gap of the run
            state.tally.base_errors[nodeid] = base_result.error or base.outcome
        if base_result is not None:
            ab.base_results = [r for r in ab.base_results if r.key != base_result.key]
            ab.base_results.append(base_result)
        ab.base_environment = ab.base_environment or base.environment
        if state.environment is None and head.environment:
            state.environment = head.environment
        for extra in head.extra:  # its own benchmark's timings, one per variant
            state.record(extra, nodeid)
        ab.base_results = [r for r in ab.base_results if r.key not in {e.key for e in base.extra}]
        ab.base_results.extend(base.extra)
        if head.result is not None:
            details = replace(head.result.details, ab=pairing.to_json())
            measured = replace(head.result, details=details)
            if head.outcome == "failed" and measured.status == "ok":  # its own assertion
                why = f"the test failed after measuring: {head.message or 'it failed'}"
                measured = replace(measured, status="error", error=why)
            state.record(measured, nodeid)
        if head.outcome == "passed":
            return
        if head.outcome == "skipped":
            pytest.skip(head.message)
        pytest.fail(f"{head.message or head.outcome} (this tree's A/B worker)", pytrace=False)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        if self.ab is not None:
            yield  # the workers called the test: nothing of it is here to look at
            return
        yield from super().pytest_runtest_call(item)

    def measures_here(self) -> bool:
        """The workers keep the limit; the driver stops waiting past it."""
        return self.ab is None

    def ending(self) -> Ending:
        head = self.state.options.orders.head_python  # a confirmation measures there too
        return replace(
            super().ending(),
            reach=lambda: self.reach if self.records else None,
            close_beside=self.close_beside,
            remeasure_orders=None if head is None else Orders(head_python=head),
        )

    def close_beside(
        self, config: pytest.Config, interrupted: bool, counting: bool
    ) -> BaseMeasuredBeside | None:
        """Stop the workers, remove the base's worktree (after counting its instructions
        there), and hand over the base's side. None when the workers never started."""
        from perfguard.pipeline import BaseMeasuredBeside
        from perfguard.pytest_plugin.finish import count_instructions

        ab, state = self.ab, self.state
        if ab is None:
            return None

        def count_base() -> None:  # in the base's worktree, before it is removed
            ab.base_results = count_instructions(
                config, state, ab.worktree.rootdir, ab.base_results, " (base side)"
            )

        base_side = ab.driver.a
        deleted = base_side.others
        if base_side.refused is not None:
            state.tally.base_failure = base_side.refused
        elif base_side.collection_errors:
            state.tally.base_failure = (
                f"the base tree ({ab.commit[:10]}) did not collect "
                f"{len(base_side.collection_errors)} module(s), so its side of those items is "
                f"missing ({base_side.collection_errors[0]})"
            )
        elif state.tally.base_errors and len(state.tally.base_errors) >= len(ab.items):
            state.tally.base_failure = (
                f"the base tree's ({ab.commit[:10]}) worker failed on every item "
                f"({next(iter(state.tally.base_errors.values()))})"
            )
        # before the monitor stops: the workers' CPU time is then ours
        ab.close(interrupted=interrupted, before_removal=count_base if counting else None)
        self.reach = ab.driver.reach
        base = tuple(ab.base_results)
        # a test the base has beside ones this tree runs is this tree's deletion; one the
        # driver ran on the base side and this tree lacks is not (it has its own result)
        kept = {r.key for r in base} | state.tally.collected  # measured there, or here at all
        deleted = tuple(d for d in deleted if d not in kept)
        # where a module of this tree did not collect, its tests are not known gone
        state.tally.deleted = () if state.tally.collection else deleted
        plan = state.planned
        return BaseMeasuredBeside(
            ab.commit,
            ab.reason,
            base,
            ab.base_environment or {},
            deleted=deleted,
            thresholds=ab_session.base_thresholds(ab),
            settings=plan.base_run,
            runs_in=None if ab.runs_in is None else ab.runs_in.to_json(),
        )
