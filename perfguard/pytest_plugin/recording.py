"""Recording what each perf test runs, on a full run: the record partial runs select against.

What a test can be affected by is what it actually ran, from collecting its module (its
conftest chain and plugins included) through its fixtures' setup to its work run untimed as
it is timed (the eager reference, and a whole step, generation or later call). The code that
ran is noted by function (`perfguard.selection.tracer`: never the trace hook, so it runs
beside pytest-cov), by context: one per collector, per fixture definition and per test; the
files opened are Python's audit events. Measuring is never recorded (the tracer is paused
around `measure_model`), nor is a test that is no perf item (its fixtures' set-up aside).

A test's record joins the contexts that made it: everything outside a collector, fixture or
test (`prelude`: the initial conftests, plugins, hooks between tests), its collectors, the
fixtures it used (a session-scoped fixture set up for another test counts for every test
that uses it) and its own items. The lines become
blocks (`perfguard.selection.blocks`); every file a test ran code of adds its module's own
code, and that of the repository modules it imports by name (a constant read from one is a
dependency too). Modules loaded before recording began, files opened, and the conftest chain
are whole-file dependencies.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.orders import OrdersError, from_environment
from perfguard.records.reach import Reach
from perfguard.selection.recorder import ELSEWHERE, Recorder

if TYPE_CHECKING:
    from perfguard.measure.job import Job

FULL_EVENTS = ("push", "schedule", "workflow_dispatch", "merge_group")
"""GitHub Actions events whose run measures everything (main's record, scheduled and manual
runs): `GITHUB_EVENT_NAME`."""


def wants_record(config: pytest.Config) -> bool:
    """Whether this session records (decided before the initial conftests are loaded, from
    the options pytest has parsed so far): `--perfguard-record=yes`, or `auto` on a full run
    (`--perfguard-save`, `--perfguard-full`, a push or scheduled run). An A/B worker records
    when its driver asks (only this tree's side of a saving run)."""
    ns = config.known_args_namespace
    if not getattr(ns, "perfguard", False):
        return False
    try:
        orders = from_environment()
    except OrdersError:
        return False  # the session stops when it reads its options, saying why
    if orders.worker:
        return orders.reach is not None
    record = getattr(ns, "perfguard_record", None) or str(config.getini("perfguard_record"))
    if record in ("yes", "no"):
        return record == "yes"
    save = getattr(ns, "perfguard_save", None)
    full = getattr(ns, "perfguard_full", None)
    return bool(
        (save if save is not None else config.getini("perfguard_save"))
        or (full if full is not None else config.getini("perfguard_full"))
        or os.environ.get("GITHUB_EVENT_NAME", "") in FULL_EVENTS
    )


class Recording:
    """The hooks that switch the recorder's context, and what each test used, for its
    record (registered beside the session's role in a session that records)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.fixtures: dict[int, str] = {}  # id(FixtureDef) -> its context
        self.used: dict[str, set[str]] = defaultdict(set)  # test -> its contexts
        self.test_files: dict[str, Path] = {}  # test -> its module's file
        self.worked: set[str] = set()  # tests whose whole call was run for the record
        self.why_not: str | None = None  # why the session that recorded has no record

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Iterator[None]:
        with self.recorder.within(f"collect:{collector.nodeid}"):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Iterator[None]:
        context = self.fixtures.setdefault(id(fixturedef), f"fixture:{len(self.fixtures)}")
        with self.recorder.within(context), self.recorder.unpaused():
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        with self._only_perf(item), self.recorder.within(self._context(item)):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        with self._only_perf(item), self.recorder.within(self._context(item)):
            yield
        self._note(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        with self.recorder.paused(), self.recorder.within(ELSEWHERE):
            yield

    def _only_perf(self, item: pytest.Item) -> contextlib.AbstractContextManager[None]:
        """A test that is no perf item runs with nothing recorded (its fixtures' set-up
        aside): the recording never slows it."""
        from perfguard.pytest_plugin.collection import variant_of

        return contextlib.nullcontext() if variant_of(item) is not None else self.recorder.paused()

    def _context(self, item: pytest.Item) -> str:
        from perfguard.pytest_plugin.collection import variant_of

        return f"item:{test_key(item)}" if variant_of(item) is not None else ELSEWHERE

    def _note(self, item: pytest.Item) -> None:
        """What `item`'s test used: its collectors, its fixtures, its own context."""
        from perfguard.pytest_plugin.collection import variant_of

        if variant_of(item) is None:
            return
        test = test_key(item)
        used = self.used[test]
        used.add(f"item:{test}")
        used.update(f"collect:{node.nodeid}" for node in item.listchain()[:-1])
        for fixturedef in _fixtures_of(item):
            context = self.fixtures.get(id(fixturedef))
            if context is not None:
                used.add(context)
        self.test_files[test] = Path(item.path)

    def record_work(self, job: Job, test: str) -> None:
        """One whole call of `test`'s workload as it is timed, and the files of its
        TorchScript modules whole (`perfguard.measure.recorded`), once per test, in the
        context now recorded into."""
        from perfguard.measure.recorded import run_as_timed, script_sources
        from perfguard.measure.runner import resolve_device
        from perfguard.selection.static import Imports, search_roots

        recorder = self.recorder
        if not recorder.recording or test in self.worked:
            return
        self.worked.add(test)
        try:
            device = resolve_device(job.settings.device)
        except Exception:  # measuring says what is wrong with it
            return
        run_as_timed(job, device)
        # TorchScript runs them where no tracer sees: the repository's, whole, with the
        # repository modules they import
        scripted = [p for p in script_sources(job.model) if recorder.inside(str(p)) is not None]
        if scripted:
            imports = Imports(search_roots(recorder.root, scripted))
            for path in scripted:
                for dep in imports.closure(path.resolve()):
                    where = recorder.inside(str(dep))
                    if where is not None:
                        recorder.whole[recorder.context].add(where)

    def write_for_driver(self) -> None:
        """An A/B worker's record, where its driver asked for it (its orders' `reach`; one
        file per worker process: a worker restarted after a crash writes its own)."""
        target = from_environment().reach
        reach = self.finish() if target else None
        if reach is not None:
            from perfguard.files import write_json_atomic

            write_json_atomic(Path(f"{target}.{os.getpid()}"), reach.to_json())

    def finish(self) -> Reach | None:
        """The record of every perf test that ran (None: nothing was recorded)."""
        from perfguard.pytest_plugin.reach_build import build_reach

        lines = self.recorder.stop()
        if self.recorder.refused is not None:
            self.why_not = (
                f"what each perf test ran was not recorded ({self.recorder.refused}); the next "
                "pull request measures every perf item"
            )
            return None
        if not self.used:
            return None
        return build_reach(self.recorder, lines, self.used, self.test_files)


def test_key(item: pytest.Item) -> str:
    """The test function's node id (every variant and parameter of it together)."""
    from perfguard.pytest_plugin.collection import test_of

    return test_of(item.nodeid)


def _fixtures_of(item: pytest.Item) -> list[Any]:
    """Every fixture definition `item` could use: its closure's (overridden ones too: an
    override may ask for the one it overrides) and those asked for by name while it ran."""
    found: list[Any] = []
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        found.extend(defs)
    request = getattr(item, "_request", None)
    found.extend(getattr(request, "_fixture_defs", {}).values())
    return found
