"""Which perf tests a change can reach: judged against the record of what each test ran at
the base commit (`perfguard.records.reach`).

A test is left out only when the base's record holds it and nothing it ran changed: no
block it executed (a function's body, or a module's own code) differs now, no file it
depended on whole changed (a file it opened, a module loaded before recording, its conftest
chain), no new file appeared in a folder its modules lie in, no file it declares (`depends`)
changed, and its imports name no changed file the record never saw (the static reading, an
addition only). A test without a record (new, renamed, a base without one) is measured, and
so is every test when a forcing file changed in a way that can move them all
(`perfguard.selection.forcing`), or a file nothing can say the readers of (not Python, not
inert, not recorded, not declared).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfguard.records.reach import Footprint, Reach
from perfguard.selection.blocks import BlockReader
from perfguard.selection.forcing import changed_pins, moves_every_test
from perfguard.selection.static import Changes, Imports, forcing, inert, search_roots

SHOWN = 3  # changed paths a reason names before "and N more"


@dataclass(frozen=True)
class Decision:
    """What a run measures: everything (`full`, with why) or the tests `affected`, each with
    what reached it (`reached`)."""

    full: bool
    reason: str
    changed: tuple[str, ...] = ()
    affected: frozenset[str] = frozenset()
    reached: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PerfTest:
    """A perf test as the selection sees it: its module's file and the globs it declares."""

    path: Path
    depends: tuple[str, ...] = ()


def _shown(paths: Sequence[str]) -> str:
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return ", ".join(paths[:SHOWN]) + more


def _matches(path: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(path, g) for g in patterns)


def decide(
    root: Path,
    changes: Changes,
    tests: Mapping[str, PerfTest],
    *,
    reach: Reach | None,
    no_record: str = "the base has no record of what each test ran",
    every_test: Sequence[str] = (),
    before: Callable[[str], str | None] = lambda _path: None,
) -> Decision:
    """Which `tests` the `changes` (rootdir-relative, against the base) reach. `reach`: the
    base's record (None: `no_record` says why there is none, and everything is measured);
    `every_test`: globs every test depends on (ini `perfguard_depends`); `before`: a file's
    text at the base (forcing files are judged by what changed in them)."""
    changed = list(changes.paths)

    def full(why: str) -> Decision:
        return Decision(True, why, tuple(changed))

    pins = _pins_by_test(root, changed, reach, before)
    moved = _forcing_reason(root, [p for p in changed if p not in pins], reach, before)
    if moved:
        return full(moved)
    if any(_matches(p, every_test) for p in changed):
        return full("a file every perf test depends on (ini perfguard_depends) changed")
    if reach is None:
        return full(f"{no_record}: every perf item measured")
    recorded_files = {path for path, _ in reach.files}
    declared = {g for source in tests.values() for g in source.depends}
    unknown = [
        p
        for p in changed
        if (not p.endswith(".py") or p.startswith("../"))
        and not inert(p)
        and not forcing(p)  # judged above: what changed in it moves no test (or its pins
        # the tests that ran them)
        and p not in recorded_files
        and not _matches(p, declared)
    ]
    if unknown:
        return full(
            f"{_shown(unknown)} changed, and neither the record nor a declaration (marker "
            "`depends`, ini perfguard_depends) says which test reads it: any test may"
        )
    judge = _Judge(root, changes, reach, tests, pins)
    reached = {}
    for test, source in tests.items():
        why = judge.why(test, source)
        if why is not None:
            reached[test] = why
    return Decision(
        False,
        f"{len(changed)} file(s) changed",
        tuple(changed),
        frozenset(reached),
        reached,
    )


def _pins_by_test(
    root: Path, changed: Sequence[str], reach: Reach | None, before: Callable[[str], str | None]
) -> dict[str, list[str]]:
    """The changed dependency files that changed only pins, with the distributions whose
    pins changed: judged test by test against the distributions each ran (a record of
    format 2; an older one's, and a change beyond pins, are judged for every test)."""
    if reach is None or reach.format < 2:
        return {}
    found: dict[str, list[str]] = {}
    for path in changed:
        if not forcing(path) or path.startswith("../"):
            continue
        try:
            now = (root / path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        names = changed_pins(path, before(path), now)
        if names is not None:
            found[path] = names
    return found


def _forcing_reason(
    root: Path, changed: Sequence[str], reach: Reach | None, before: Callable[[str], str | None]
) -> str | None:
    """Why a changed forcing file can move every test, or None."""
    distributions = None if reach is None else set(reach.distributions)
    for path in changed:
        if not forcing(path):
            continue
        now = None
        if not path.startswith("../"):
            try:
                now = (root / path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                now = None
        why = moves_every_test(path, before(path), now, distributions)
        if why is not None:
            return f"{path} changed ({why}), which can move every perf test"
    return None


class _Judge:
    """One change judged test by test, each changed file read once."""

    def __init__(
        self,
        root: Path,
        changes: Changes,
        reach: Reach,
        tests: Mapping[str, PerfTest],
        pins: Mapping[str, list[str]],
    ) -> None:
        self.root, self.changes, self.reach, self.pins = root, changes, reach, pins
        self.changed = set(changes.paths)
        self.head_blocks = BlockReader(root)  # each file's blocks now (None: deleted, unparsed)
        self.seen = {path for path, _ in reach.files}
        # the static reading adds only what the record never saw
        self.unseen_py = {
            (root / p).resolve()
            for p in changes.paths
            if p.endswith(".py") and p not in self.seen and not p.startswith("../")
        }
        self.imports = Imports(search_roots(root, [s.path for s in tests.values()]))

    def why(self, test: str, source: PerfTest) -> str | None:
        """What of the change reaches `test` (None: nothing)."""
        r = self.reach.tests.get(test)
        if r is None:
            return "no record of this test at the base (new, or renamed)"
        return (
            self._block_changed(r)
            or self._file_changed(r)
            or self._pin_changed(r)
            or self._new_in_package(r)
            or self._declared(source)
            or self._imported(source)
        )

    def _block_changed(self, r: Footprint) -> str | None:
        for index in sorted(r.blocks):
            path, name, recorded = self.reach.block(index)
            if path not in self.changed:
                continue
            now = self.head_blocks(path)
            if now is None:
                gone = "deleted" if not (self.root / path).exists() else "does not parse"
                return f"{path} ({gone})"
            if now.checksums.get(name) != recorded:
                return f"{path}: {name}"
        return None

    def _file_changed(self, r: Footprint) -> str | None:
        for index in sorted(r.files):
            path = self.reach.file(index)
            if path in self.changed:
                return f"{path} (read whole: opened, loaded before recording, or its conftest)"
        return None

    def _pin_changed(self, r: Footprint) -> str | None:
        for path, names in sorted(self.pins.items()):
            ran = sorted(set(names) & r.distributions)
            if ran:
                return f"{path}: the pin of {', '.join(ran[:3])}, whose code it ran"
        return None

    def _new_in_package(self, r: Footprint) -> str | None:
        """A new module reaches a test that listed its folder (a registry, a plugin folder
        loads what it finds); one imported by name is reached through its importer (a
        change of it, or `_imported`). A record of format 1 has no listings: the folders of
        the modules the test ran stand for them."""
        folders = r.listed if self.reach.format >= 2 else r.packages
        for path in sorted(self.changes.added):
            folder = str(Path(path).parent.as_posix())
            if path.endswith(".py") and folder in folders:
                why = "listed" if self.reach.format >= 2 else "a package it imported"
                return f"{path} (a new file in a folder {why})"
        return None

    def _declared(self, source: PerfTest) -> str | None:
        for path in sorted(self.changed):
            if _matches(path, source.depends):
                return f"{path} (declared: depends)"
        return None

    def _imported(self, source: PerfTest) -> str | None:
        if not self.unseen_py:
            return None
        reached = self.imports.closure(source.path) & self.unseen_py
        if not reached:
            return None
        first = sorted(reached)[0]
        try:
            shown = first.relative_to(self.root.resolve()).as_posix()
        except ValueError:
            shown = str(first)
        return f"{shown} (its module imports it; the record never ran it)"
