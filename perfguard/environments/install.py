"""What gets installed, read from a tree's own files: which files say it, whether a change
between two trees changes it, and the requirements that install it.

The files are the repository's dependency tables at its root: `pyproject.toml` (its
`[project]` dependencies and extras, `[build-system]`, `[dependency-groups]`, and uv's,
poetry's and pdm's tables), `setup.py`, `setup.cfg` (`[options]`), `requirements*.txt` and
`requirements/*.txt|in`, `constraints*.txt`, and the locks `uv.lock`, `poetry.lock`,
`pdm.lock`, `Pipfile.lock`, and conda's `environment.yml`. A change that touches none of
what they install (a comment, a version line, another tool's table) changes nothing.

`requirements(tree)` turns them into one requirements file for pip or uv: each
requirements file by `-r`, each constraints file by `-c`, a lock's packages pinned (with the
markers it gives), conda's pip section and its packages by their PyPI names, and the project
itself (`-e .`) where it is a package. Nothing here runs an installer.
"""

from __future__ import annotations

import configparser
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from perfguard.errors import PerfguardError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

INSTALL_FILES = (
    r"pyproject\.toml",
    r"setup\.py",
    r"setup\.cfg",
    r"requirements[^/]*\.(txt|in)",
    r"requirements/[^/]+\.(txt|in)",
    r"constraints[^/]*\.txt",
    r"uv\.lock",
    r"poetry\.lock",
    r"pdm\.lock",
    r"Pipfile\.lock",
    r"environment\.ya?ml",
)
"""The files, relative to the repository's root, that say what gets installed."""

CONDA_TO_PYPI = {"pytorch": "torch", "pytorch-cuda": "", "python": "", "pip": "", "cudatoolkit": ""}
"""conda packages by their PyPI names ("": no PyPI package: left out)."""


class InstallFileError(PerfguardError, ValueError):
    """A dependency file that does not read as its format."""


def is_install_file(path: str) -> bool:
    """Whether `path` (relative to the repository's root) says what gets installed."""
    return any(re.fullmatch(pattern, path) for pattern in INSTALL_FILES)


def install_files(tree: Path) -> list[str]:
    """The dependency files of `tree`, relative to it, sorted."""
    found = [p.relative_to(tree).as_posix() for p in tree.glob("*") if p.is_file()]
    found += [p.relative_to(tree).as_posix() for p in tree.glob("requirements/*") if p.is_file()]
    return sorted(p for p in found if is_install_file(p))


def installs(path: str, text: str | None) -> Any:
    """What a dependency file installs, as a value two versions of it compare by (None:
    absent). A file that does not parse is its whole text: any change of it counts."""
    if text is None:
        return None
    name = PurePosixPath(path).name
    try:
        if name == "pyproject.toml":
            return _pyproject_installs(tomllib.loads(text))
        if name == "setup.cfg":
            return _setup_cfg_installs(text)
        if name.endswith((".txt", ".in")):
            return sorted(_requirement_lines(text))
        if name.endswith(".lock") or name == "Pipfile.lock":
            return sorted(_lock_pins(name, text))
        if name.startswith("environment."):
            return sorted(_conda_requirements(text))
    except (ValueError, KeyError, TypeError, tomllib.TOMLDecodeError, configparser.Error):
        return text
    return text  # setup.py: code, whatever changed in it


def _pyproject_installs(doc: Mapping[str, Any]) -> dict[str, Any]:
    project = doc.get("project", {})
    tool = doc.get("tool", {})
    return {
        "project": {k: project.get(k) for k in ("dependencies", "optional-dependencies")},
        "package": "project" in doc,
        "build-system": doc.get("build-system", {}).get("requires"),
        "dependency-groups": doc.get("dependency-groups"),
        "poetry": {
            k: v for k, v in tool.get("poetry", {}).items() if "dependencies" in k or k == "group"
        },
        "uv": tool.get("uv", {}).get("sources"),
        "pdm": tool.get("pdm", {}).get("dev-dependencies"),
    }


def _setup_cfg_installs(text: str) -> dict[str, Any]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    options = dict(parser["options"]) if parser.has_section("options") else {}
    extras = (
        dict(parser["options.extras_require"])
        if parser.has_section("options.extras_require")
        else {}
    )
    return {"install_requires": options.get("install_requires"), "extras": extras}


def _requirement_lines(text: str) -> list[str]:
    """A requirements file's lines, without comments, blank lines and continuations."""
    out = []
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(re.sub(r"\s+", " ", line))
    return out


def _lock_pins(name: str, text: str) -> list[str]:
    """A lock's packages as requirement lines, `name==version[; markers]` (a package the
    lock takes from the project itself, or from a path, is the project's to install)."""
    out: list[str] = []
    if name == "Pipfile.lock":
        doc = json.loads(text)
        for group in ("default", "develop"):
            for package, spec in doc.get(group, {}).items():
                version = str(spec.get("version", "")) if isinstance(spec, Mapping) else ""
                if not version.startswith("=="):
                    continue  # a path, a VCS link, an editable: not from an index
                markers = spec.get("markers")
                out.append(f"{package}{version}" + (f"; {markers}" if markers else ""))
        return out
    doc = tomllib.loads(text)
    for package in doc.get("package", []):
        if not _from_index(package.get("source")):
            continue  # editable, virtual, directory, path, git: the project's own
        markers = package.get("markers") or package.get("marker")
        line = f"{package['name']}=={package['version']}"
        out.append(line + (f"; {markers}" if isinstance(markers, str) and markers else ""))
    return out


def _from_index(source: Any) -> bool:
    """Whether a lock's package comes from an index: poetry's and pdm's without a source
    (PyPI) or from a private index (`legacy`), uv's from a registry or a URL."""
    if not isinstance(source, Mapping) or not source:
        return True
    if "type" in source:  # poetry's: directory, file, git, url, or a private index
        return source.get("type") == "legacy"
    return "registry" in source or "url" in source


def _conda_requirements(text: str) -> list[str]:
    """conda's environment.yml: its `pip:` section, and its packages by their PyPI names
    (`name=1.2` is `name==1.2`; a channel prefix is dropped)."""
    import yaml

    doc = yaml.safe_load(text) or {}
    out: list[str] = []
    for dep in doc.get("dependencies", []):
        if isinstance(dep, Mapping):
            out.extend(str(line) for line in dep.get("pip", []))
            continue
        spec = str(dep).split("::")[-1].strip()
        match = re.match(r"^([A-Za-z0-9_.-]+)\s*(.*)$", spec)
        if match is None:
            continue
        name, rest = match.groups()
        name = CONDA_TO_PYPI.get(name.lower(), name)
        if not name:
            continue
        rest = rest.replace(" ", "")
        if re.fullmatch(r"=[^=<>!].*", rest):
            rest = "=" + rest if not rest.endswith("*") else "==" + rest[1:]
        out.append(f"{name}{rest}")
    return out


def changed_installs(
    paths: Iterable[str], before: Mapping[str, str | None], after: Mapping[str, str | None]
) -> list[str]:
    """The dependency files among `paths` whose installs differ between `before` and
    `after` (their texts; None: absent)."""
    return [
        p
        for p in sorted(paths)
        if is_install_file(p) and installs(p, before.get(p)) != installs(p, after.get(p))
    ]


@dataclass(frozen=True)
class Requirements:
    """What installs a tree: the lines of one requirements file (paths absolute), and the
    files they came from."""

    lines: tuple[str, ...]
    sources: tuple[str, ...]

    def text(self) -> str:
        return "".join(f"{line}\n" for line in self.lines)


def requirements(tree: Path, extra: Iterable[str] = ()) -> Requirements:
    """The requirements that install `tree`'s dependencies (see the module), with `extra`
    lines added (perfguard's own). `InstallFileError` where a file does not read."""
    lines: list[str] = []
    sources: list[str] = []
    for path in install_files(tree):
        full = tree / path
        name = PurePosixPath(path).name
        try:
            text = full.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InstallFileError(f"{path} does not read: {exc}") from None
        try:
            if re.fullmatch(r"requirements[^/]*\.(txt|in)|requirements/.*", path):
                lines.append(f"-r {full}")
            elif name.startswith("constraints"):
                lines.append(f"-c {full}")
            elif name.endswith(".lock"):
                lines.extend(_lock_pins(name, text))
            elif name.startswith("environment."):
                lines.extend(_conda_requirements(text))
            else:
                continue  # the project's own files: installed as the project, below
        except (ValueError, KeyError, TypeError, tomllib.TOMLDecodeError) as exc:
            raise InstallFileError(f"{path} does not read as its format: {exc}") from None
        sources.append(path)
    if _is_package(tree):
        lines.append(f"-e {tree}")
        sources.extend(
            p for p in ("pyproject.toml", "setup.py", "setup.cfg") if (tree / p).is_file()
        )
    lines.extend(extra)
    return Requirements(tuple(lines), tuple(sources))


def _is_package(tree: Path) -> bool:
    """Whether the tree is an installable project (a `[project]` table, or setuptools')."""
    if (tree / "setup.py").is_file():
        return True
    if (tree / "setup.cfg").is_file():
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(tree / "setup.cfg", encoding="utf-8")
        except configparser.Error:
            return False
        if parser.has_section("metadata") and parser.has_option("metadata", "name"):
            return True
    try:
        doc = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return "project" in doc
