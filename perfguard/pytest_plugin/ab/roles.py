"""The roles of same-job A/B's sessions: the driving session the user started
(`AbDriving`: it collects, selects and compares, and has the workers run each perf item) and
each tree's worker (`AbWorker`: it runs the items its driver asks for, when asked)."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.pytest_plugin.ab import session as ab_session
from perfguard.pytest_plugin.ab.protocol import Collected, Ended, Result
from perfguard.pytest_plugin.collection import (
    measured_in_ab,
    test_id,
    test_of,
    times_itself,
    variant_of,
)
from perfguard.pytest_plugin.options import configured
from perfguard.pytest_plugin.roles import (
    Measuring,
    begin_item,
    end_item,
    no_cuda,
    within_import_limit,
)
from perfguard.pytest_plugin.state import SessionState
from perfguard.pytest_plugin.timeout import limit_of

if TYPE_CHECKING:
    from perfguard.pytest_plugin.ab.session import AbSession


class AbDriving(Measuring):
    """`--perfguard-ab`: the workers run each perf item, the base's and this tree's,
    interleaved; this session drives them and compares the pairs."""

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The workers start now, before this session collects: importing torch and
        collecting the suite take seconds, in each of the three processes at once. (Where a
        test path lies outside the rootdir, they start once this session has collected.)"""
        config = session.config
        paths = ab_session.session_paths(config)
        if paths is None or config.option.collectonly:
            return
        self.state.ab = ab_session.start(
            Path(config.rootpath), self.state.options, None, paths, record=self.state.records
        )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        ab = self.state.ab
        if ab is not None and not any(measured_in_ab(i) for i in session.items):
            self.state.ab = None  # nothing for the workers to run
            ab.close()
        super().pytest_collection_finish(session)

    def start(self, session: pytest.Session) -> None:
        perf_items = [i.nodeid for i in session.items if measured_in_ab(i)]
        if perf_items and self.state.ab is not None:
            self.state.ab.items = perf_items  # sent to the workers when they are connected
        elif perf_items:
            # first: its workers start (import torch, collect) while this session does
            root = Path(session.config.rootpath)
            self.state.ab = ab_session.start(
                root, self.state.options, perf_items, record=self.state.records
            )
        super().start(session)

    def cuda_available(self) -> bool:
        """Asked of the workers, which import torch anyway: this session measures nothing
        and need not import it (1-2 s of CPU while both workers start)."""
        ab = self.state.ab
        if ab is not None:
            ab.driver.connect(ab.items, self.state.progress.note)
            if (cuda := ab.driver.cuda) is not None:
                return cuda
        return super().cuda_available()

    def check_cuda(self, device: str) -> None:
        """As the workers see it (which CUDA device each has is theirs to say, per item)."""
        if not self.cuda_available():
            if self.state.ab is not None:
                self.state.ab.close(interrupted=True)
                self.state.ab = None
            raise pytest.UsageError(no_cuda(device))

    def check_device(self) -> None:
        from perfguard.health import EXCLUSIVE_ADVICE

        if self.state.ab is not None and self.state.exclusive_gpu:
            self.state.ab.close(interrupted=True)
            self.state.ab = None
            raise pytest.UsageError(f"--perfguard-ab: {EXCLUSIVE_ADVICE}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        """The workers run the perf test (or the test that times itself); this session does
        not."""
        variant = variant_of(pyfuncitem)
        if self.state.ab is not None and times_itself(pyfuncitem):
            self.run_whole(self.state.ab, pyfuncitem)
            return True
        if self.state.ab is None or variant is None:
            return None
        limit = limit_of(pyfuncitem, self.state.options.timeout_s)
        test = test_id(pyfuncitem, variant)
        self.run_item(self.state.ab, pyfuncitem.nodeid, test, variant, limit)
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
        th = ab_session.guarded(state.thresholds(), ab).for_test(test)
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
        floor = ab_session.floor(state, ab, test_of(nodeid))
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
        if self.state.ab is not None:
            yield  # the workers called the test: nothing of it is here to look at
            return
        yield from super().pytest_runtest_call(item)

    def measures_here(self) -> bool:
        """The workers keep the limit; the driver stops waiting past it."""
        return self.state.ab is None


class AbWorker:
    """A worker of an A/B driver: only the driver's items, in its order, each when asked;
    it tells the driver how each ended."""

    def __init__(self, state: SessionState) -> None:
        assert state.worker is not None
        self.state = state
        self.link = state.worker

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        environment = None
        try:  # while the driver gets ready
            from perfguard.measure.isolation import preload
            from perfguard.pytest_plugin.finish import fallback_environment

            cuda: bool | None = preload()
            environment = fallback_environment(self.state.options.device)
        except Exception:  # torch did not import: each item that needs it says why
            cuda = None
        rank = {nodeid: i for i, nodeid in enumerate(self.link.items)}
        kept = sorted((i for i in items if i.nodeid in rank), key=lambda i: rank[i.nodeid])
        dropped = [i for i in items if i.nodeid not in rank]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        others = tuple((test_id(i, v), v) for i in dropped if (v := variant_of(i)) is not None)
        errors = tuple(f"{where}: {line}" for where, line in self.state.tally.collection)
        rules = self.state.thresholds().to_json()  # its tree's markers: the base's bar
        # its tree's own ini (both workers run the driver's command line) and markers
        settings = {
            "run": configured(config, Path(config.rootpath)),
            "tests": self.state.guarded()["tests"],
        }
        self.link.send(
            Collected(
                tuple(i.nodeid for i in kept), cuda, errors, others, rules, environment, settings
            )
        )

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, None]:
        """Block until the driver lets this item run (skip it when the driver does not),
        then run it within its limit, each attempt from its set-up to its teardown."""
        from perfguard.pytest_plugin.ab.worker import DriverGoneError

        if measured_in_ab(item):
            try:
                go = self.link.may_start(item.nodeid)
            except DriverGoneError as exc:
                pytest.exit(str(exc), returncode=0)
            if not go:
                pytest.skip("not run in this A/B session")
            begin_item(self.state, item)
        yield

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, None]:
        yield
        end_item(self.state, item, record=False)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, None]:
        yield from within_import_limit(self.state, collector)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, Any, None]:
        outcome = yield
        if measured_in_ab(item):
            report = outcome.get_result()
            if report.when == "call" and report.passed and times_itself(item):
                self.send_benchmark(item)
            self.report_end(report)

    def send_benchmark(self, item: pytest.Item) -> None:
        """The timings of a test that timed itself, for the driver (before how it ended)."""
        from perfguard.pytest_plugin.benchmark_bridge import result_from_benchmark

        bench = getattr(item, "funcargs", {}).get("benchmark")
        result = None if bench is None else result_from_benchmark(item.nodeid, bench)
        if result is not None:
            with contextlib.suppress(OSError):
                self.link.send(Result(item.nodeid, result.to_json(), self.state.environment))

    def report_end(self, report: pytest.TestReport) -> None:
        """Tell the driver how the item ended (after its call, or a setup that did not pass)."""
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        if report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        else:
            lines = report.longreprtext.strip().splitlines()
            errors = [line[1:].strip() for line in lines if line.startswith("E ")]
            message = " ".join(errors[:2]) if errors else (lines[-1] if lines else "")
        # when the driver is gone, the next item's setup ends the session
        with contextlib.suppress(OSError):
            self.link.send(Ended(report.nodeid, report.outcome, message))

    def pytest_sessionfinish(self) -> None:
        """Write what each test ran, when the driver asked, then hang up."""
        if self.state.recording is not None:
            self.state.recording.write_for_driver()
        self.link.close()
