"""The static reading of a change: the files it touched, the files whose change can move
every perf test, the files no perf test reads, and the import closure of a module read from
its source (`ast`, every `import` at any depth, so an import inside a function counts too,
with the `__init__.py` of every package on the way).

No static reading of Python is sound (fixtures, registries, `importlib` and package paths
reach models no import statement names), so a partial run never skips a test on this alone:
the record of what each test ran decides (`perfguard.selection.decide`), and the import
closure only adds the tests that import a changed file the record never saw.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from perfguard.git import changes_since

FORCING = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "pytest.ini",
    "tox.ini",
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
"""Files whose change can move every perf test (matched against the path and its name);
what changed in each is judged by `perfguard.selection.forcing`. A conftest.py is not among
them: it is in the record of every test below it."""
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


@dataclass(frozen=True)
class Changes:
    """The rootdir-relative paths a change touched, and which of them are new."""

    paths: tuple[str, ...]
    added: frozenset[str] = frozenset()


def changed_files(root: Path, base: str) -> Changes:
    """The rootdir-relative paths that differ between commit `base` and the working tree at
    `root`: committed, staged and unstaged changes, and new Python files git does not ignore
    (`GitError` where git cannot say)."""
    top, names, untracked, added = changes_since(root, base)
    # new Python files count (a test may import one); other untracked files are a working
    # tree's outputs (reports, caches), which a checkout in CI does not have
    new = [name for name in untracked if name.endswith(".py")]

    def relative(name: str) -> str:
        try:
            return (top / name).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            return f"../{name}"  # outside the rootdir: matched by the forcing rules alone

    paths = tuple(relative(n) for n in sorted(set(filter(None, [*names, *new]))))
    return Changes(paths, frozenset(relative(n) for n in (*added, *new) if n))


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
    # each file's imports of modules outside the roots, by their top-level name
    _external: dict[Path, frozenset[str]] = field(default_factory=dict)

    def external(self, path: Path) -> frozenset[str]:
        """The top-level names of what `path` imports from outside the repository (an
        installed package's, the standard library's)."""
        path = path.resolve()
        self.direct(path)
        return self._external.get(path, frozenset())

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
        outside: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    mine = self._module(alias.name)
                    found |= mine
                    if not mine:
                        outside.add(alias.name.partition(".")[0])
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, package)
                if base is None:
                    continue
                mine = self._module(base)
                found |= mine
                if not mine and not node.level:
                    outside.add(base.partition(".")[0])
                for alias in node.names:  # `from pkg import sub`: sub may be a module
                    found |= self._module(f"{base}.{alias.name}" if base else alias.name)
        self._external[path] = frozenset(outside)
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


def inert(path: str) -> bool:
    """Whether `path` is a file no perf test can read to measure (documentation, images)."""
    return listed(path, INERT)
