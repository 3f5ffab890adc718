"""Forcing files judged by what changed in them: a change to the build, the dependencies, or
pytest's and perfguard's settings can move every perf test; a version bump, a comment,
another tool's table, or a changed pin of a package no recorded test imported cannot.

`moves_every_test(path, before, after, distributions)` answers for one changed forcing file,
given its text at the base and now (None: absent). A file this module cannot read (it does
not parse, or is of a kind it has no reading of) moves every test: the safe answer.
Nothing here imports torch or pytest.
"""

from __future__ import annotations

import configparser
import json
import re
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import PurePosixPath
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PROJECT_ONLY_WORDS = frozenset(
    {
        "version",
        "description",
        "readme",
        "authors",
        "maintainers",
        "urls",
        "classifiers",
        "keywords",
        "license",
        "license-files",
    }
)
"""Keys of pyproject.toml's [project] table that describe the package, not what it runs."""
OTHER_TOOLS = frozenset(
    {
        "ruff",
        "black",
        "isort",
        "mypy",
        "pyright",
        "pylint",
        "flake8",
        "coverage",
        "codespell",
        "bumpversion",
        "bumpver",
        "commitizen",
        "towncrier",
        "pydocstyle",
        "docformatter",
        "interrogate",
        "semantic_release",
        "cibuildwheel",
        "check-manifest",
        "pyproject-fmt",
        "typos",
        "vulture",
        "yapf",
        "autopep8",
        "pycln",
        "bandit",
        "tbump",
    }
)
"""[tool.*] tables of tools that never run a perf test (linters, formatters, releases)."""
CFG_OTHER_SECTIONS = re.compile(
    r"^(flake8|pycodestyle|pep8|pydocstyle|isort|mypy(-.*)?|coverage:.*|bdist_wheel|"
    r"codespell|pylint.*|yapf|bumpversion(:.*)?|egg_info|sdist)$"
)
"""setup.cfg sections of other tools (setup.cfg's [tool:pytest] and [options] do matter)."""


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def moves_every_test(
    path: str, before: str | None, after: str | None, distributions: Collection[str] | None
) -> str | None:
    """Why the change of forcing file `path` from `before` to `after` can move every perf
    test (a phrase for "... changed: ..."), or None where it cannot. `distributions`: the
    installed distributions the recorded tests imported (None: not known)."""
    if before is None or after is None:
        return "added or deleted"
    name = PurePosixPath(path).name
    reader = _READERS.get(name)
    if reader is None:
        for pattern, candidate in _PATTERN_READERS:
            if re.fullmatch(pattern, path) or re.fullmatch(pattern, name):
                reader = candidate
                break
    if reader is None:
        return "its content"
    try:
        return reader(before, after, distributions)
    except (ValueError, KeyError, TypeError, tomllib.TOMLDecodeError, configparser.Error):
        return "it does not read as its format"


Reader = Callable[[str, str, "Collection[str] | None"], "str | None"]


def _pyproject(before: str, after: str, distributions: Collection[str] | None) -> str | None:
    old, new = tomllib.loads(before), tomllib.loads(after)
    old_deps = _project_requirements(old)
    new_deps = _project_requirements(new)
    for doc in (old, new):
        project = doc.get("project", {})
        for key in (*PROJECT_ONLY_WORDS, "dependencies", "optional-dependencies"):
            project.pop(key, None)
        for tool in OTHER_TOOLS:
            doc.get("tool", {}).pop(tool, None)
    if old != new:
        return f"[{_first_difference(old, new)}]"
    return _pins(old_deps, new_deps, distributions)


def _project_requirements(doc: Mapping[str, Any]) -> dict[str, str]:
    project = doc.get("project", {})
    lines = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        lines.extend(extra)
    return _requirements("\n".join(lines))


def _first_difference(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> str:
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a != b:
            if isinstance(a, Mapping) and isinstance(b, Mapping):
                return _first_difference(a, b, f"{prefix}{key}.")
            return f"{prefix}{key}"
    return prefix.rstrip(".") or "?"


def _config(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return parser


def _sections(parser: configparser.ConfigParser, keep: Callable[[str], bool]) -> dict[str, Any]:
    return {s: dict(parser[s]) for s in parser.sections() if keep(s)}


def _setup_cfg(before: str, after: str, distributions: Collection[str] | None) -> str | None:
    def keep(section: str) -> bool:
        return not CFG_OTHER_SECTIONS.match(section)

    old, new = _sections(_config(before), keep), _sections(_config(after), keep)
    for doc in (old, new):
        for key in PROJECT_ONLY_WORDS | {"long_description", "author", "author_email", "url"}:
            doc.get("metadata", {}).pop(key, None)
    if old != new:
        return f"[{_first_difference(old, new)}]"
    return None


def _pytest_sections(before: str, after: str, distributions: Collection[str] | None) -> str | None:
    """tox.ini and pytest.ini: pytest's own sections."""

    def keep(section: str) -> bool:
        return section in ("pytest", "tool:pytest")

    old, new = _sections(_config(before), keep), _sections(_config(after), keep)
    return None if old == new else f"[{_first_difference(old, new)}]"


REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*?)\s*$")


def _requirements(text: str) -> dict[str, str]:
    """A requirements file as {distribution: the rest of its line}; an option line (`-r`,
    `--index-url`, `-e`) keeps its whole text as its key."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            out[line] = ""
            continue
        match = REQUIREMENT.match(line)
        if match is None:
            raise ValueError(f"not a requirement: {line!r}")
        out[normalized(match.group(1))] = f"{match.group(2) or ''}{match.group(3)}"
    return out


def _pins(
    old: Mapping[str, str], new: Mapping[str, str], distributions: Collection[str] | None
) -> str | None:
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if not changed:
        return None
    if distributions is None:
        return f"the pins of {', '.join(changed[:3])}"
    options = [k for k in changed if k.startswith("-")]
    if options:
        return f"the line {options[0]!r}"
    used = [k for k in changed if k in distributions]
    if used:
        return f"the pins of {', '.join(used[:3])}, which the recorded tests import"
    return None


def _requirements_file(
    before: str, after: str, distributions: Collection[str] | None
) -> str | None:
    return _pins(_requirements(before), _requirements(after), distributions)


def _lock_packages(text: str) -> dict[str, str]:
    """A TOML lock's packages by name (each its table, as JSON), and its header as `-lock`."""
    doc = tomllib.loads(text)
    out = {}
    for package in doc.get("package", []):
        out[normalized(str(package["name"]))] = json.dumps(package, sort_keys=True)
    rest = {k: v for k, v in doc.items() if k != "package"}
    out["-lock"] = json.dumps(rest, sort_keys=True, default=str)
    return out


def _pipfile_packages(text: str) -> dict[str, str]:
    doc = json.loads(text)
    out = {}
    for group in ("default", "develop"):
        for name, spec in doc.get(group, {}).items():
            out[normalized(name)] = json.dumps(spec, sort_keys=True)
    return out


def changed_pins(path: str, before: str | None, after: str | None) -> list[str] | None:
    """The distributions whose pins a change of dependency file `path` changed, where that
    is all it changed (a test that never ran one of them cannot move); None where it changed
    anything else (an option line, another table, the lock's header, the file itself
    appearing), or where it does not read: then `moves_every_test` judges it."""
    if before is None or after is None:
        return None
    name = PurePosixPath(path).name
    try:
        if name == "pyproject.toml":
            old, new = tomllib.loads(before), tomllib.loads(after)
            if _without_pins(old) != _without_pins(new):
                return None
            pins = _project_requirements(old), _project_requirements(new)
        elif name in ("uv.lock", "poetry.lock", "pdm.lock"):
            pins = _lock_packages(before), _lock_packages(after)
            for side in pins:  # the lock's header (its version, its options) moves no test
                side.pop("-lock")
        elif name == "Pipfile.lock":
            pins = _pipfile_packages(before), _pipfile_packages(after)
        elif any(re.fullmatch(p, path) or re.fullmatch(p, name) for p, _ in _PATTERN_READERS):
            pins = _requirements(before), _requirements(after)
        else:
            return None
    except (ValueError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return None
    changed = sorted(k for k in set(pins[0]) | set(pins[1]) if pins[0].get(k) != pins[1].get(k))
    if any(k.startswith("-") for k in changed):
        return None
    return changed


def _without_pins(doc: Mapping[str, Any]) -> dict[str, Any]:
    """pyproject.toml without what `_pyproject` ignores and without its requirement lists."""
    out = json.loads(json.dumps(doc))
    project = out.get("project", {})
    for key in (*PROJECT_ONLY_WORDS, "dependencies", "optional-dependencies"):
        project.pop(key, None)
    for tool in OTHER_TOOLS:
        out.get("tool", {}).pop(tool, None)
    return dict(out)


def _toml_lock(before: str, after: str, distributions: Collection[str] | None) -> str | None:
    """uv.lock, poetry.lock, pdm.lock: [[package]] tables with a name."""
    old, new = _lock_packages(before), _lock_packages(after)
    # the lock's own header (its version, resolution options) is no package
    if old.pop("-lock") != new.pop("-lock") and distributions is None:
        return "its header"
    return _pins(old, new, distributions)


def _pipfile_lock(before: str, after: str, distributions: Collection[str] | None) -> str | None:
    return _pins(_pipfile_packages(before), _pipfile_packages(after), distributions)


_READERS: Mapping[str, Reader] = {
    "pyproject.toml": _pyproject,
    "setup.cfg": _setup_cfg,
    "tox.ini": _pytest_sections,
    "pytest.ini": _pytest_sections,
    "uv.lock": _toml_lock,
    "poetry.lock": _toml_lock,
    "pdm.lock": _toml_lock,
    "Pipfile.lock": _pipfile_lock,
}
_PATTERN_READERS: tuple[tuple[str, Reader], ...] = (
    (r"requirements[^/]*\.txt", _requirements_file),
    (r"constraints[^/]*\.txt", _requirements_file),
    (r"requirements/[^/]+\.(txt|in)", _requirements_file),
)
