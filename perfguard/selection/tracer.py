"""Which functions ran, by context: the tracer behind the record of what each perf test ran.

A record needs blocks (a function's body, a class, a module's own code), not lines, so the
tracer notes each code object the first time it starts in a context: a function called, a
module imported, a class body run. It does not trace lines, and it leaves the trace hook
alone, so it runs beside a coverage session the user already has (pytest-cov, `coverage
run`) and beside a debugger:

- on Python 3.12 and later, through `sys.monitoring` under a tool id of its own: each code
  object's start is reported once and then disabled, until the context changes;
- before 3.12, through the profile hook, by the standard library's C profiler (`cProfile`,
  one per context, without the builtins: a quarter of a second more for `import torch`,
  where a profile hook in Python cost two), in the thread that records. A profiler that
  takes that hook after recording began replaces it: `replaced()` says so, and the record
  is refused (the next pull request then measures everything); one already there when
  recording starts is refused at once.

Pausing (`pause`, `resume`, counted) removes the hook: nothing timed ever runs under it.
`stop()` gives the lines of every code object that ran, by context and by file, as the
record's builder reads them. Nothing here imports torch or pytest.
"""

from __future__ import annotations

import cProfile
import sys
from collections import defaultdict
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

TOOL_NAME = "perfguard"
TOOL_IDS = (3, 4)  # the ids no standard tool claims (debugger 0, coverage 1, profiler 2, 5)


class CodeTracer:
    """See the module's docstring."""

    def __init__(self) -> None:
        self.context = ""
        self.refused: str | None = None  # why nothing could be recorded
        self._ran: dict[str, set[CodeType]] = defaultdict(set)  # sys.monitoring's
        self._seen = self._ran[self.context]
        self._profiles: dict[str, _Profile] = {}  # before 3.12: one per context
        self._profile = self._profile_of(self.context)
        self._paused = 0
        self._running = False
        self._tool: int | None = None
        # the files of the code that ran outside the repository, by context (once stopped)
        self.outside: dict[str, set[str]] = defaultdict(set)

    def _profile_of(self, context: str) -> _Profile:
        found = self._profiles.get(context)
        if found is None:
            found = self._profiles[context] = _Profile(builtins=False)
        return found

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        """Begin recording (or say in `refused` why it cannot)."""
        if sys.version_info >= (3, 12):
            self._start_monitoring()
        else:
            held = sys.getprofile()
            if held is not None:
                self.refused = f"another profiler ({_name(held)}) was running: not recorded"
                return
            self._install()
        self._running = self.refused is None

    def _start_monitoring(self) -> None:
        monitoring = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        for tool in TOOL_IDS:
            if monitoring.get_tool(tool) is None:
                monitoring.use_tool_id(tool, TOOL_NAME)
                self._tool = tool
                break
        else:
            self.refused = "no sys.monitoring tool id was free (3 and 4 taken): not recorded"
            return
        monitoring.register_callback(self._tool, monitoring.events.PY_START, self._started)
        self._install()

    def _install(self) -> None:
        if self._tool is not None:
            monitoring = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
            monitoring.set_events(self._tool, monitoring.events.PY_START)
            return
        self._profile.enable()

    def _remove(self) -> None:
        if self._tool is not None:
            sys.monitoring.set_events(self._tool, 0)  # type: ignore[attr-defined,unused-ignore]
            return
        if _profiler() is self._profile:
            self._profile.disable()

    def _started(self, code: CodeType, offset: int) -> Any:
        self._seen.add(code)
        return sys.monitoring.DISABLE  # type: ignore[attr-defined,unused-ignore]

    def replaced(self) -> str | None:
        """Why the record cannot be trusted: another tool took the hook while it ran."""
        if not self._running or self._paused:
            return None
        if self._tool is not None:
            held = sys.monitoring.get_tool(self._tool)  # type: ignore[attr-defined,unused-ignore]
            return None if held == TOOL_NAME else f"another tool ({held}) took its monitoring id"
        held = _profiler()
        if held is self._profile:
            return None
        return f"another profiler ({_name(held)}) replaced the recording's while the tests ran"

    def switch(self, context: str) -> None:
        """Note what starts from now on in `context`."""
        if context == self.context:
            return
        self.context = context
        self._seen = self._ran[context]
        if self._tool is not None:
            if self._running and not self._paused:
                sys.monitoring.restart_events()  # type: ignore[attr-defined,unused-ignore]
            return
        active = self._running and not self._paused and _profiler() is self._profile
        if active:
            self._profile.disable()
        self._profile = self._profile_of(context)
        if active:
            self._profile.enable()

    def pause(self) -> None:
        self._paused += 1
        if self._paused == 1 and self._running:
            self._remove()

    def resume(self) -> None:
        self._paused -= 1
        if self._paused == 0 and self._running:
            self._install()
            if self._tool is not None:
                sys.monitoring.restart_events()  # type: ignore[attr-defined,unused-ignore]

    def stop(self, inside: Callable[[str], str | None]) -> dict[str, dict[str, set[int]]]:
        """Stop: the lines of each code object that ran, by context, then by file (`inside`
        turns a code object's file into the repository's path, or None: the file is kept in
        `outside`, by context)."""
        if self._running:
            self._remove()
            if self._tool is not None:
                monitoring = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
                monitoring.register_callback(self._tool, monitoring.events.PY_START, None)
                monitoring.free_tool_id(self._tool)
            self._running = False
        for context, profile in self._profiles.items():
            for entry in profile.getstats():
                if isinstance(entry.code, CodeType):
                    self._ran[context].add(entry.code)
            self._ran[context] |= profile.called
        self._profiles.clear()
        where: dict[str, str | None] = {}
        lines: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
        for context, codes in self._ran.items():
            for code in codes:
                name = code.co_filename
                if name not in where:
                    where[name] = inside(name)
                path = where[name]
                if path is not None:
                    lines[context][path].update(_lines(code))
                else:
                    self.outside[context].add(name)
        self._ran.clear()
        return lines


class _Profile(cProfile.Profile):
    """The C profiler, which code that saves and restores the profile hook (pytest-benchmark
    does, around its timing) may put back as a hook in Python: then it is called as one, and
    notes what starts, as the C profiler would have."""

    def __init__(self, *, builtins: bool) -> None:
        super().__init__(builtins=builtins)
        self.called: set[CodeType] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.called.add(frame.f_code)


def _profiler() -> object:
    """What holds this thread's profile hook (a `cProfile.Profile` is its own hook's object)."""
    return sys.getprofile()


def _lines(code: CodeType) -> set[int]:
    return {line for _start, _end, line in code.co_lines() if line is not None}


def _name(hook: Any) -> str:
    owner = getattr(hook, "__self__", None)
    what = owner if owner is not None else hook
    return f"{type(what).__module__}.{type(what).__qualname__}"
