"""Partial runs: which perf tests a change can affect, from the files it touched.

A pull request measures only the perf tests whose files it changed. What a test depends on:
the files its module imports, transitively, within the repository (read from the source with
`ast`, every `import` at any depth of the module, so an import inside a function counts too),
with the `__init__.py` of every package on the way; plus the globs the user declares for what
imports cannot show (data, configs, native code): the ini key `perfguard_depends` for every
test, the marker key `depends` for one. A change to anything that can move every test forces a
full run (`FORCING`: the build and lock files, pytest's and perfguard's settings, any
`conftest.py`, the workflows), as does a file the import reading could not parse.

Nothing here imports torch or pytest: the plugin's selection step (`pytest_plugin.selection`)
asks, and the benchmark `benchmarks/pr_cost.py` and the tests call the same functions.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from perfguard.git import changes_since

FORCING = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "pytest.ini",
    "tox.ini",
    "conftest.py",
    "*.lock",
    "requirements*.txt",
    "requirements/*",
    "constraints*.txt",
    "environment.yml",
    "environment.yaml",
    "Pipfile",
    "perfguard-accept.toml",
    ".python-version",
    ".github/workflows/*",
    "CMakeLists.txt",
)
"""Files whose change can move every perf test (matched against the path and its name)."""
INERT = (
    "*.md",
    "*.rst",
    "*.png",
    "*.jpg",
    "*.jpeg",
    "*.gif",
    "*.svg",
    "LICENSE*",
    "NOTICE*",
    "AUTHORS*",
    "CHANGELOG*",
    ".gitignore",
    ".gitattributes",
    ".github/*",
    "docs/*",
)
"""Files no perf test reads to measure: their change measures nothing. Any other file that is
not Python (data, configs, native code) is read by whoever declares it (`depends`); an
undeclared one forces a full run."""


def changed_files(root: Path, base: str) -> list[str]:
    """The rootdir-relative paths that differ between commit `base` and the working tree at
    `root`: committed, staged and unstaged changes, and new Python files git does not ignore
    (`GitError` where git cannot say)."""
    top, names, untracked = changes_since(root, base)
    # new Python files count (a test may import one); other untracked files are a working
    # tree's outputs (reports, caches), which a checkout in CI does not have
    names += [name for name in untracked if name.endswith(".py")]
    # paths relative to the rootdir, which may lie below the repository's top
    out = []
    for name in sorted(set(filter(None, names))):
        try:
            out.append((top / name).resolve().relative_to(root.resolve()).as_posix())
        except ValueError:
            out.append(f"../{name}")  # outside the rootdir: matched by the forcing rules alone
    return out


def listed(path: str, patterns: Iterable[str]) -> bool:
    """Whether `path`, or its file name, matches one of `patterns`."""
    name = PurePosixPath(path).name
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(name, p) for p in patterns)


def forcing(path: str) -> bool:
    """Whether a change to `path` can move every perf test."""
    return listed(path, FORCING)


@dataclass
class Imports:
    """The import closure of modules within `roots` (the folders imports are resolved in:
    the rootdir, a `src` layout's folder, a test's own folder), cached per file."""

    roots: tuple[Path, ...]
    _direct: dict[Path, frozenset[Path]] = field(default_factory=dict)
    unreadable: set[Path] = field(default_factory=set)  # files `ast` could not parse

    def closure(self, start: Path) -> set[Path]:
        """`start` and every repository file it imports, transitively."""
        seen: set[Path] = set()
        todo = [start.resolve()]
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            todo.extend(self.direct(path) - seen)
        return seen

    def direct(self, path: Path) -> frozenset[Path]:
        if path not in self._direct:
            self._direct[path] = frozenset(self._read(path))
        return self._direct[path]

    def _read(self, path: Path) -> set[Path]:
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            self.unreadable.add(path)
            return set()
        package = self._package_of(path)
        found: set[Path] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found |= self._module(alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, package)
                if base is None:
                    continue
                found |= self._module(base)
                for alias in node.names:  # `from pkg import sub`: sub may be a module
                    found |= self._module(f"{base}.{alias.name}" if base else alias.name)
        return found

    def _module(self, name: str) -> set[Path]:
        """The files importing `name` runs (each package's `__init__.py`, then the module)."""
        parts = name.split(".")
        for root in self.roots:
            files: set[Path] = set()
            for i in range(1, len(parts) + 1):
                folder = root.joinpath(*parts[:i])
                if (folder / "__init__.py").is_file():
                    files.add((folder / "__init__.py").resolve())
                elif folder.with_suffix(".py").is_file():
                    files.add(folder.with_suffix(".py").resolve())
                    break
                elif not folder.is_dir():
                    break
            if files:
                return files
        return set()

    def _package_of(self, path: Path) -> str:
        """The dotted package `path` is in, as seen from the first root that holds it."""
        for root in self.roots:
            try:
                rel = path.resolve().relative_to(root.resolve())
            except ValueError:
                continue
            return ".".join(rel.parts[:-1])  # a module's package; an __init__.py's own
        return ""


def _absolute(module: str | None, level: int, package: str) -> str | None:
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])


def search_roots(root: Path, test_files: Iterable[Path]) -> tuple[Path, ...]:
    """Where imports resolve: the rootdir, its `src` folder, and each test file's first
    folder without an `__init__.py` above it (pytest's default `prepend` import mode)."""
    roots = [root.resolve()]
    if (root / "src").is_dir():
        roots.append((root / "src").resolve())
    for f in test_files:
        folder = f.resolve().parent
        while (folder / "__init__.py").is_file() and folder != root.resolve():
            folder = folder.parent
        if folder not in roots:
            roots.append(folder)
    return tuple(roots)


@dataclass(frozen=True)
class Decision:
    """What a run measures: everything (`full`, with why) or the tests `affected`."""

    full: bool
    reason: str
    changed: tuple[str, ...] = ()
    affected: frozenset[str] = frozenset()  # the tests the change reaches


def inert(path: str) -> bool:
    """Whether `path` is a file no perf test can read to measure (documentation, images)."""
    return listed(path, INERT)


def decide(
    root: Path,
    changed: Sequence[str],
    tests: Mapping[str, tuple[Path, tuple[str, ...]]],
    *,
    every_test: Sequence[str] = (),
) -> Decision:
    """Which `tests` (test id -> its module's file and its declared dependencies, marker
    `depends`) the `changed` paths (rootdir-relative) reach; `every_test`: the dependencies
    of every test (ini `perfguard_depends`). Full where a forcing file changed, or a file
    neither Python (read for its imports), nor inert, nor declared by any test: nothing says
    who reads it."""

    def shown(paths: Sequence[str]) -> str:
        more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
        return ", ".join(paths[:3]) + more

    def matches(path: str, patterns: Iterable[str]) -> bool:
        return any(fnmatch.fnmatch(path, g) for g in patterns)

    changed = list(changed)
    forced = [p for p in changed if forcing(p)]
    if forced:
        why = f"{shown(forced)} changed, which can move every perf test"
        return Decision(True, why, tuple(changed))
    if any(matches(p, every_test) for p in changed):
        why = "a file every perf test depends on (ini perfguard_depends) changed"
        return Decision(True, why, tuple(changed))
    gone = [p for p in changed if p.endswith(".py") and not (root / p).exists()]
    if gone:  # a deleted test is a gap to report, a deleted module breaks who imported it
        why = f"{shown(gone)} deleted: the tests it held, or that imported it, must be seen"
        return Decision(True, why, tuple(changed))
    declared = {g for _, patterns in tests.values() for g in patterns}
    unknown = [
        p
        for p in changed
        if (not p.endswith(".py") or p.startswith("../")) and not inert(p)
        and not matches(p, declared)
    ]  # fmt: skip
    if unknown:
        why = (
            f"{shown(unknown)} changed, and no perf test declares it (marker `depends`, ini "
            "perfguard_depends): any test may read it"
        )
        return Decision(True, why, tuple(changed))
    imports = Imports(search_roots(root, [f for f, _ in tests.values()]))
    touched = {(root / p).resolve() for p in changed if p.endswith(".py")}
    affected = set()
    for test, (test_file, patterns) in tests.items():
        deps = imports.closure(test_file)
        # a module whose source could not be read hides its own imports: measured
        reads = any(matches(p, patterns) for p in changed)
        if deps & touched or deps & imports.unreadable or reads:
            affected.add(test)
    return Decision(False, f"{len(changed)} file(s) changed", tuple(changed), frozenset(affected))
