"""A recording's lines made into the record (`perfguard.records.reach.Reach`): each test's
blocks, whole-file dependencies and package folders, with the checksums of the files as they
are on disk (the commit being measured)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from perfguard.records.reach import Reach, ReachBuilder
from perfguard.selection.blocks import MODULE, BlockReader, checksum
from perfguard.selection.static import Imports, search_roots

if TYPE_CHECKING:
    from perfguard.pytest_plugin.recording import Recorder


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
        builder.add(
            test,
            blocks=blocks,
            files=[builder.file(p, files.sums(p)) for p in sorted(whole)],
            packages=packages,
        )
    builder.distributions.update(_distributions())
    return builder.build()


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
