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
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.orders import OrdersError, from_environment
from perfguard.records.reach import Reach
from perfguard.selection.tracer import CodeTracer

if TYPE_CHECKING:
    from perfguard.measure.job import Job

FULL_EVENTS = ("push", "schedule", "workflow_dispatch", "merge_group")
"""GitHub Actions events whose run measures everything (main's record, scheduled and manual
runs): `GITHUB_EVENT_NAME`."""

PRELUDE, ELSEWHERE = "prelude", "elsewhere"
"""Contexts: outside any collector, fixture or test (the initial conftests, plugins, hooks
between tests: every test's), and what no perf test's record holds (other tests,
teardowns)."""

_ACTIVE: list[Recorder] = []  # the recorder the audit hook reports opened files to


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


STARTS_A_PROCESS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn")
"""Audit events of a process started: what it runs, the tracer cannot follow."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _ACTIVE:
        return
    if event == "open":
        _ACTIVE[-1].opened(args[0], args[1] if len(args) > 1 else None)
    elif event in STARTS_A_PROCESS:
        _ACTIVE[-1].started_process(event, args)


class Recorder:
    """The tracer and the files opened, by context."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.context = PRELUDE
        self.refused: str | None = None  # why nothing could be recorded
        self.files_opened: dict[str, set[str]] = defaultdict(set)
        self.loaded_before = self._repository_modules()
        self._tracer: CodeTracer | None = None
        self._paused = 0
        # what ran where the tracer cannot follow, noted by another process (a rank's)
        self.extra: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
        # contexts that started a process of their own: what it ran is unknown
        self.unfollowed: dict[str, str] = {}
        # files whose code ran where no tracer sees (TorchScript, a native extension): whole
        self.whole: dict[str, set[str]] = defaultdict(set)

    def _repository_modules(self) -> set[str]:
        """The repository's modules already imported (sitecustomize, `-p` plugins)."""
        found = set()
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None) or ""
            where = self.inside(path)
            if where is not None and os.path.isfile(path):
                found.add(where)
        return found

    def inside(self, path: Any) -> str | None:
        """`path` relative to the rootdir, where it is the repository's own file (not an
        installed package, a virtual environment, git's or perfguard's)."""
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str | os.PathLike) or not str(path):
            return None
        try:
            full = Path(os.path.abspath(path))
            rel = full.relative_to(self.root)
        except (ValueError, OSError):
            return None
        parts = rel.parts
        if any(p in ("site-packages", "dist-packages", ".git", "__pycache__") for p in parts):
            return None
        if _under(full, sys.prefix) or _under(full, _PERFGUARD):
            return None
        return rel.as_posix()

    def start(self) -> None:
        tracer = CodeTracer()
        tracer.start()
        if tracer.refused is not None:
            self.refused = tracer.refused
            return
        self._tracer = tracer
        tracer.switch(self.context)
        if not _ACTIVE and not getattr(_audit, "installed", False):
            sys.addaudithook(_audit)
            _audit.installed = True  # type: ignore[attr-defined]
        _ACTIVE.append(self)

    @property
    def recording(self) -> bool:
        return self._tracer is not None

    def opened(self, path: Any, mode: Any) -> None:
        if self._paused or (isinstance(mode, str) and "r" not in mode and "+" not in mode):
            return
        where = self.inside(path)
        if where is not None and not where.endswith((".py", ".pyc")):
            self.files_opened[self.context].add(where)

    def started_process(self, event: str, args: tuple[Any, ...]) -> None:
        """A test (its collection, a fixture, its call) started a process: whatever that runs
        is outside any record, so the test has none (it is always measured)."""
        if self._paused or self._tracer is None or self.context in (PRELUDE, ELSEWHERE):
            return
        what = args[0] if args else ""
        if isinstance(what, list | tuple):
            what = " ".join(str(a) for a in what[:3])
        self.unfollowed.setdefault(self.context, f"it started a process ({event}: {what})")

    def add(self, context: str, lines: dict[str, set[int]]) -> None:
        """Lines another process ran for `context` (repository paths)."""
        for path, numbers in lines.items():
            self.extra[context][path].update(numbers)

    def _check(self) -> None:
        """A tool that took the tracer's hook while it ran makes the record untrustworthy."""
        if self._tracer is not None and self.refused is None:
            why = self._tracer.replaced()
            if why is not None:
                self.refused = f"{why}: not recorded"

    def switch(self, context: str) -> str:
        """Record into `context` from now on; the context before."""
        before, self.context = self.context, context
        if self._tracer is not None:
            self._check()
            self._tracer.switch(context)
        return before

    @contextlib.contextmanager
    def within(self, context: str) -> Iterator[None]:
        before = self.switch(context)
        try:
            yield
        finally:
            self.switch(before)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Nothing recorded in the block (measuring: no timed call runs under the tracer;
        a test that is no perf item: it is never slowed by the recording)."""
        if self._tracer is None:
            yield
            return
        self._check()
        self._paused += 1
        self._tracer.pause()
        try:
            yield
        finally:
            self._paused -= 1
            self._tracer.resume()

    @contextlib.contextmanager
    def unpaused(self) -> Iterator[None]:
        """Recorded even inside a paused block (a fixture set up for a test that is no perf
        item may serve a perf test later: its set-up is recorded in its own context)."""
        if self._tracer is None or not self._paused:
            yield
            return
        held = self._paused
        for _ in range(held):
            self._tracer.resume()
        self._paused = 0
        try:
            yield
        finally:
            self._check()
            self._paused = held
            for _ in range(held):
                self._tracer.pause()

    def stop(self) -> dict[str, dict[str, set[int]]]:
        """Stop recording: the lines of the code that ran, by context, then file."""
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self._tracer is None:
            return {}
        self._check()
        tracer, self._tracer = self._tracer, None
        lines = tracer.stop(self.inside)
        for context, files in self.extra.items():
            for path, numbers in files.items():
                lines.setdefault(context, {}).setdefault(path, set()).update(numbers)
        return lines


_PERFGUARD = str(Path(__file__).resolve().parent.parent)


def _under(path: Path, folder: str) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True


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
