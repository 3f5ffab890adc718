"""A recording's lines made into the record (`perfguard.records.reach.Reach`): each test's
blocks, whole-file dependencies and package folders, with the checksums of the files as they
are on disk (the commit being measured)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from perfguard.records.reach import Reach, ReachBuilder
from perfguard.selection.blocks import MODULE, BlockReader, checksum
from perfguard.selection.static import Imports, search_roots

if TYPE_CHECKING:
    from perfguard.selection.recorder import Recorder


class _Files:
    """The repository's files as the record reads them: bytes' checksums and blocks, once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._sums: dict[str, str] = {}
        self.blocks = BlockReader(root)  # None for a file that does not parse

    def sums(self, path: str) -> str:
        if path not in self._sums:
            try:
                self._sums[path] = checksum((self.root / path).read_bytes())
            except OSError:
                self._sums[path] = "missing"
        return self._sums[path]


def build_reach(
    recorder: Recorder,
    lines: Mapping[str, Mapping[str, set[int]]],
    used: Mapping[str, set[str]],
    test_files: Mapping[str, Path],
) -> Reach:
    """Each test's record from the lines of the contexts it used (see `recording`)."""
    root = recorder.root
    files = _Files(root)
    imports = Imports(search_roots(root, test_files.values()))
    installed = _Installed()
    builder = ReachBuilder()
    for test, contexts in sorted(used.items()):
        if any(c in recorder.unfollowed for c in contexts):
            continue  # it started a process: no record, so it is always measured
        ran: dict[str, set[int]] = {}
        opened: set[str] = set()
        for context in (*contexts, "prelude"):
            for path, numbers in lines.get(context, {}).items():
                ran.setdefault(path, set()).update(numbers)
            opened |= recorder.files_opened.get(context, set())
            opened |= recorder.whole.get(context, set())
        blocks: list[int] = []
        whole: set[str] = set(recorder.loaded_before) | opened
        whole |= _conftest_chain(root, test_files[test])
        imported = set()
        for path in ran:
            for dep in imports.closure(root / path):
                rel = recorder.inside(str(dep))
                if rel is not None and rel not in ran:
                    imported.add(rel)
        for path in sorted(ran.keys() | imported):
            found = files.blocks(path)
            if found is None:
                whole.add(path)
                continue
            names = found.of_lines(ran[path]) if path in ran else {MODULE}
            blocks.extend(
                builder.block(path, files.sums(path), name, found.checksums[name])
                for name in sorted(names)
            )
        packages = {str(PurePosixPath(p).parent) for p in (*ran, *imported) if p.endswith(".py")}
        listed: set[str] = set()
        executed: set[str] = set()
        for context in (*contexts, "prelude"):
            listed |= recorder.listed.get(context, set())
            executed |= recorder.outside.get(context, set())
        imports_by_name: set[str] = set()
        for path in {*ran, *imported, *_conftest_chain(root, test_files[test])}:
            if path.endswith(".py"):
                imports_by_name |= imports.external(root / path)
        builder.add(
            test,
            blocks=blocks,
            files=[builder.file(p, files.sums(p)) for p in sorted(whole)],
            packages=packages,
            listed=listed,
            distributions=installed.of_test(executed, imports_by_name),
        )
    builder.distributions.update(_distributions())
    return builder.build()


class _Installed:
    """Which installed distributions a test ran: those whose code ran in its contexts, but
    for perfguard's machinery (its own requirements, pytest and its plugins), which count
    only where the repository's code the test ran imports them by name; and those it imports
    by name."""

    def __init__(self) -> None:
        from importlib.metadata import entry_points, packages_distributions, requires

        from perfguard.selection.forcing import normalized

        self.by_module = {
            m: {normalized(d) for d in ds} for m, ds in packages_distributions().items()
        }
        own = {normalized(re.split(r"[<>=!~;\[ ]", r)[0]) for r in (_requires(requires))}
        plugins = {normalized(ep.dist.name) for ep in entry_points(group="pytest11") if ep.dist}
        self.pytest = plugins | {"pytest", "pluggy", "iniconfig"}  # a test file names them too
        self.machinery = (own | self.pytest) - {"torch"}
        self.sites = sorted(
            (p for p in sys.path if p and os.path.isdir(p) and ("-packages" in p)),
            key=len,
            reverse=True,
        )
        self._top: dict[str, str | None] = {}

    def top(self, filename: str) -> str | None:
        """The top-level module an installed file belongs to (None: not an installed one)."""
        if filename not in self._top:
            found = None
            for site in self.sites:
                if filename.startswith(site + os.sep):
                    first = filename[len(site) + 1 :].split(os.sep)[0]
                    found = first.split(".")[0]
                    break
            self._top[filename] = found
        return self._top[filename]

    def of_test(self, executed: set[str], imported: set[str]) -> set[str]:
        ran = {d for f in executed if (t := self.top(f)) for d in self.by_module.get(t, ())}
        named = {d for name in imported for d in self.by_module.get(name, ())}
        return ((ran - self.machinery) | (named - self.pytest)) - {"perfguard"}


def _requires(requires: Any) -> list[str]:
    try:
        return list(requires("perfguard") or [])
    except Exception:  # not installed as a distribution (a source checkout)
        return []


def _conftest_chain(root: Path, test_file: Path) -> set[str]:
    """The conftest.py files from the test's folder up to the rootdir."""
    found = set()
    folder = test_file.resolve().parent
    while True:
        if (folder / "conftest.py").is_file():
            try:
                found.add((folder / "conftest.py").relative_to(root).as_posix())
            except ValueError:
                break
        if folder == root or folder.parent == folder:
            break
        folder = folder.parent
    return found


def _distributions() -> set[str]:
    """The installed distributions of the modules this process imported (normalized names,
    as lock files write them): a changed pin of any other cannot move a recorded test."""
    from importlib.metadata import packages_distributions

    from perfguard.selection.forcing import normalized

    by_module = packages_distributions()
    found: set[str] = set()
    for name in list(sys.modules):
        top = name.partition(".")[0]
        found.update(normalized(d) for d in by_module.get(top, ()))
    return found
