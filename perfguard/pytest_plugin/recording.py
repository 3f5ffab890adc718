"""Recording what each perf test runs, on a full run: the record partial runs select against.

What a test can be affected by is what it actually ran, from collecting its module (its
conftest chain and plugins included) through its fixtures' setup to one untimed call of its
work (the eager reference every item computes before it is measured). The lines executed are
coverage.py's (a maintained tracer, as pytest-testmon uses), by dynamic context: one per
collector, per fixture definition and per test; the files opened are Python's audit events.
Measuring itself is never traced: the tracer stops around `measure_model`, so no timed call,
compile or memory figure runs under it.

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
from typing import Any

import pytest

from perfguard.orders import OrdersError, from_environment
from perfguard.records.reach import Reach

FULL_EVENTS = ("push", "schedule", "workflow_dispatch", "merge_group")
"""GitHub Actions events whose run measures everything (main's record, scheduled and manual
runs): `GITHUB_EVENT_NAME`."""

PRELUDE, ELSEWHERE = "prelude", "elsewhere"
"""Contexts: outside any collector, fixture or test (the initial conftests, plugins, hooks
between tests: every test's), and what no perf test's record holds (other tests,
teardowns)."""

QUIET = (
    "no-data-collected",
    "module-not-measured",
    "module-not-imported",
    "module-not-python",
    "already-imported",
    "couldnt-parse",
    "no-ctracer",
)
"""coverage.py's warnings, none of which is the user's business here."""

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


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _ACTIVE:
        _ACTIVE[-1].opened(args[0], args[1] if len(args) > 1 else None)


class Recorder:
    """The tracer and the files opened, by context."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.context = PRELUDE
        self.refused: str | None = None  # why nothing could be recorded
        self.files_opened: dict[str, set[str]] = defaultdict(set)
        self.loaded_before = self._repository_modules()
        self._cov: Any = None
        self._paused = 0

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
        if sys.gettrace() is not None:
            self.refused = "another tracer (coverage, a debugger) was running: not recorded"
            return
        import coverage

        self._cov = coverage.Coverage(
            data_file=None,
            source=[str(self.root)],
            omit=["*/site-packages/*", "*/dist-packages/*", f"{sys.prefix}/*", f"{_PERFGUARD}/*"],
            branch=False,
            config_file=False,
        )
        # a run that records nothing of a kind is no news: coverage's warnings stay quiet
        self._cov.set_option("run:disable_warnings", list(QUIET))
        self._cov.start()
        self._cov.switch_context(self.context)
        if not _ACTIVE and not getattr(_audit, "installed", False):
            sys.addaudithook(_audit)
            _audit.installed = True  # type: ignore[attr-defined]
        _ACTIVE.append(self)

    @property
    def recording(self) -> bool:
        return self._cov is not None

    def opened(self, path: Any, mode: Any) -> None:
        if self._paused or (isinstance(mode, str) and "r" not in mode and "+" not in mode):
            return
        where = self.inside(path)
        if where is not None and not where.endswith((".py", ".pyc")):
            self.files_opened[self.context].add(where)

    def switch(self, context: str) -> str:
        """Record into `context` from now on; the context before."""
        before, self.context = self.context, context
        if self._cov is not None and not self._paused:
            self._cov.switch_context(context)
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
        """Nothing recorded in the block (measuring: no timed call runs under the tracer)."""
        if self._cov is None:
            yield
            return
        self._paused += 1
        if self._paused == 1:
            self._cov.stop()
        try:
            yield
        finally:
            self._paused -= 1
            if self._paused == 0:
                self._cov.start()
                self._cov.switch_context(self.context)

    def stop(self) -> dict[str, dict[str, set[int]]]:
        """Stop recording: the lines executed, by context, then file."""
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self._cov is None:
            return {}
        self._cov.stop()
        data = self._cov.get_data()
        self._cov = None
        lines: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
        for filename in data.measured_files():
            where = self.inside(filename)
            if where is None:
                continue
            for line, contexts in (data.contexts_by_lineno(filename) or {}).items():
                for context in contexts:
                    lines[context][where].add(line)
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

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Iterator[None]:
        with self.recorder.within(f"collect:{collector.nodeid}"):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Iterator[None]:
        context = self.fixtures.setdefault(id(fixturedef), f"fixture:{len(self.fixtures)}")
        with self.recorder.within(context):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        with self.recorder.within(self._context(item)):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        with self.recorder.within(self._context(item)):
            yield
        self._note(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        with self.recorder.within(ELSEWHERE):
            yield

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
        if self.recorder.refused is not None or not self.used:
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
