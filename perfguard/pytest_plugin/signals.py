"""Signals in a measuring session: SIGTERM ends it as Ctrl-C does, and neither lands inside
torch's import.

A cancelled CI job gets SIGTERM, whose default ends the process at once: no results file,
no word. Raised as KeyboardInterrupt instead, pytest unwinds the session: it says it was
interrupted, what was measured is written, nothing is saved, the A/B workers are stopped and
the base's worktree removed.

A KeyboardInterrupt inside `import torch` leaves torch half-registered (its operator
libraries are registered once per process), and every later import of it fails with an
unrelated error, the one that describes the machine at the end included; so does a time
limit's signal. A measuring session therefore runs torch's import, whoever asks for it and
when, with those signals held (`HeldImport`), and acts on one that came meanwhile as soon as
the import is done. (Torch
still loads only when something imports it: an A/B driver never does.)
"""

from __future__ import annotations

import contextlib
import copy
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

HELD = (signal.SIGINT, signal.SIGTERM)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def held(signums: tuple[int, ...] = HELD) -> Iterator[None]:
    """Run the block with `signums` held: one that comes meanwhile is delivered again, to
    the handler of before, when the block ends. (Outside the main thread, where no handler
    can be set, the block runs as it is.)"""
    if not _main_thread():
        yield
        return
    came: list[int] = []

    def note(signum: int, frame: Any) -> None:
        came.append(signum)

    previous = {signum: signal.signal(signum, note) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if came:
            signal.raise_signal(came[0])


STOPPED_BY: list[str] = []  # the signal that interrupted this process, for its results


def _interrupt(signum: int, frame: Any) -> None:
    STOPPED_BY.append(signal.Signals(signum).name)
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


def interrupt_on_sigterm() -> Callable[[], None]:
    """From now on SIGTERM raises KeyboardInterrupt; returns what puts the handler of before
    back (a no-op outside the main thread)."""
    if not _main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _interrupt)

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) is _interrupt:
            signal.signal(signal.SIGTERM, previous)

    return restore


class HeldImport(MetaPathFinder):
    """A `sys.meta_path` finder that lets the other finders find `name` and runs the
    module's code with the signals held. A signal held meanwhile is raised as the import
    ends, and the import system then drops the module it had just run whole; the next
    import of `name` is given that module back instead of running it a second time."""

    def __init__(self, name: str, signums: tuple[int, ...] = HELD) -> None:
        self.name = name
        self.signums = signums
        self.whole: ModuleType | None = None

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != self.name:
            return None
        if self.whole is not None and self.whole.__spec__ is not None:
            spec = copy.copy(self.whole.__spec__)
            spec.loader = _Again(self.whole)
            return spec
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            found: ModuleSpec | None = find(name, path, target)
            if found is not None:
                break
        else:
            return None
        if not isinstance(found.loader, Loader):
            return found
        found.loader = _Held(found.loader, self)
        return found

    def install(self) -> Callable[[], None]:
        """Put it first in `sys.meta_path`; returns what takes it out."""
        sys.meta_path.insert(0, self)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)

        return remove


class _Held(Loader):
    """The module's own loader, its code run with the signals held."""

    def __init__(self, loader: Loader, finder: HeldImport) -> None:
        self.loader, self.finder = loader, finder

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader  # the module sees its own loader, as ever
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        with held(self.finder.signums):
            self.loader.exec_module(module)
            self.finder.whole = module


class _Again(Loader):
    """Gives back a module that was run whole once."""

    def __init__(self, module: ModuleType) -> None:
        self.module, self.spec = module, module.__spec__

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec
