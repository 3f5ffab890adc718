"""The recorder of what each perf test runs: the code that ran (`tracer`) and the files it
opened, the folders it listed and the processes it started (Python's audit events), each by
context (a collector, a fixture, a test: the plugin's `Recording` switches them). Nothing
here imports pytest; `perfguard.pytest_plugin.reach_build` makes the record from it."""

from __future__ import annotations

import contextlib
import os
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfguard.selection.tracer import CodeTracer

PRELUDE, ELSEWHERE = "prelude", "elsewhere"
"""Contexts: outside any collector, fixture or test (the initial conftests, plugins, hooks
between tests: every test's), and what no perf test's record holds (other tests,
teardowns)."""

_ACTIVE: list[Recorder] = []  # the recorder the audit hook reports opened files to


STARTS_A_PROCESS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn")
"""Audit events of a process started: what it runs, the tracer cannot follow."""
LISTS_A_FOLDER = ("os.listdir", "os.scandir", "glob.glob")
"""Audit events of a folder listed (by the test's code: the import system's own listings,
which find modules by name, are not)."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _ACTIVE:
        return
    if event == "open":
        _ACTIVE[-1].opened(args[0], args[1] if len(args) > 1 else None)
    elif event in STARTS_A_PROCESS:
        _ACTIVE[-1].started_process(event, args)
    elif event in LISTS_A_FOLDER:
        caller = sys._getframe(1)
        if not caller.f_code.co_filename.startswith("<frozen importlib"):
            _ACTIVE[-1].listed_folder(args[0] if args else ".")


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
        self.listed: dict[str, set[str]] = defaultdict(set)  # folders listed, by context
        self.outside: dict[str, set[str]] = {}  # files of code that ran outside, by context

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
        if parts and parts[0].startswith("__editable__"):  # an editable install's path hook
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

    def listed_folder(self, path: Any) -> None:
        """The test's code listed a folder (a glob: the folder it searches from)."""
        if self._paused or self._tracer is None:
            return
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if isinstance(path, int):
            return  # a file descriptor
        folder = str(path) if path not in (None, "") else "."
        if any(ch in folder for ch in "*?["):
            folder = os.path.dirname(folder.split("*")[0].split("?")[0].split("[")[0]) or "."
        where = self.inside(folder)
        if where is not None:
            self.listed[self.context].add(where)

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
        self.outside = dict(tracer.outside)
        for context, files in self.extra.items():
            for path, numbers in files.items():
                lines.setdefault(context, {}).setdefault(path, set()).update(numbers)
        return lines


_PERFGUARD = str(Path(__file__).resolve().parent.parent)  # perfguard's own code


def _under(path: Path, folder: str) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True
