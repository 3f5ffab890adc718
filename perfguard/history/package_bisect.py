"""`perfguard bisect --package NAME --good V1 --bad V2`: the first version of a dependency
between V1 and V2 where the selected perf tests moved, the tree fixed.

The versions come from an explicit list (`--versions`), a folder of wheels (`--find-links`)
or the index (`pip index versions`), ordered as versions are (a nightly's date orders it).
Each version gets an environment (`perfguard.environments`): this one's packages with NAME
at that version, built and cached by the hash of what installs it, or the team's own command
(`--install`, with `{version}` and `{package}` in it). Each step measures the tree in two of
them, paired as a pull request's A/B is (`--perfguard-ab-env` for the earlier version's side,
the later one's given to the driver), and the search is the commits' (`bisect.search`): the
first version whose change stands is the culprit, with its own paired evidence.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfguard.environments import default_cache, environment_for
from perfguard.environments.build import EnvironmentBuildError
from perfguard.history.bisect import BisectError, Step, classify
from perfguard.orders import Orders, child_environment


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_key(text: str) -> tuple[int, Any]:
    """Versions in version order (a nightly's date orders it), anything else after them."""
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(text))
    except InvalidVersion:
        return (1, text)


def versions_between(
    package: str,
    good: str,
    bad: str,
    *,
    listed: Sequence[str] = (),
    find_links: Path | None = None,
    index: Callable[[str], list[str]] | None = None,
) -> list[str]:
    """GOOD, the versions between it and BAD, and BAD, in version order."""
    if listed:
        found = list(listed)
    elif find_links is not None:
        found = _in_folder(package, find_links)
    else:
        found = (index or _on_index)(package)
    order = sorted({*found, good, bad}, key=_version_key)
    lo, hi = order.index(good), order.index(bad)
    if lo >= hi:
        raise BisectError(f"--good {good} must come before --bad {bad} among the versions")
    return order[lo : hi + 1]


def _in_folder(package: str, folder: Path) -> list[str]:
    """The versions of `package` whose wheel or sdist lies in `folder`."""
    if not folder.is_dir():
        raise BisectError(f"--find-links {folder}: no such folder")
    want = normalized(package)
    found = []
    for path in folder.iterdir():
        name = path.name
        if name.endswith(".whl"):
            parts = name[: -len(".whl")].split("-")
        elif name.endswith((".tar.gz", ".zip")):
            parts = re.sub(r"\.(tar\.gz|zip)$", "", name).rsplit("-", 1)
        else:
            continue
        if len(parts) >= 2 and normalized(parts[0]) == want:
            found.append(parts[1])
    return found


def _on_index(package: str) -> list[str]:
    """The versions the index offers (`pip index versions`)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.partition(":")[2].split(",") if v.strip()]
    said = (done.stderr or done.stdout).strip().splitlines()
    raise BisectError(
        f"the index lists no versions of {package} ({said[-1] if said else 'no answer'}): "
        "give them with --versions or --find-links"
    )


def frozen(package: str, version: str) -> str:
    """This environment's packages, pinned (perfguard itself aside), with `package` at
    `version`: the requirements of the environment that tries it."""
    want = normalized(package)
    lines = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if not name or normalized(str(name)) in ("perfguard", want):
            continue
        lines[normalized(str(name))] = f"{name}=={dist.version}"
    lines[want] = f"{package}=={version}"
    return "".join(f"{line}\n" for line in sorted(lines.values(), key=str.lower))


@dataclass
class Environments:
    """One environment per version tried, built once (cached by what installs it)."""

    package: str
    install: str | None = None  # the team's command, with {version} and {package}
    cache: Path = field(default_factory=default_cache)
    timeout_s: float = 1800.0
    log: Callable[[str], None] = print
    built: dict[str, Path] = field(default_factory=dict)

    def python(self, version: str) -> Path:
        if version not in self.built:
            with tempfile.TemporaryDirectory(prefix="perfguard-bisect-env-") as name:
                tree = Path(name)
                (tree / "requirements.txt").write_text(frozen(self.package, version))
                command = None
                if self.install is not None:
                    command = self.install.replace("{version}", version).replace(
                        "{package}", self.package
                    )
                try:
                    env = environment_for(
                        tree, self.cache, install=command, timeout_s=self.timeout_s, say=self.log
                    )
                except EnvironmentBuildError as exc:
                    raise BisectError(f"{self.package}=={version}: {exc}") from None
            self.built[version] = env.python
        return self.built[version]


@dataclass
class PackageMeasure:
    """`measure(base, head)` (versions): the tree measured in the two versions' environments,
    paired as same-job A/B pairs two commits."""

    root: Path
    pytest_args: Sequence[str]
    environments: Environments

    def __call__(self, base: str, head: str) -> Step:
        """`base` and `head` are `NAME==VERSION` (as the search names them)."""
        base_python = self.environments.python(base.partition("==")[2])
        head_python = self.environments.python(head.partition("==")[2])
        with tempfile.TemporaryDirectory(prefix="perfguard-bisect-") as name:
            folder = Path(name)
            command = [
                sys.executable, "-m", "pytest", *self.pytest_args, "--perfguard",
                f"--perfguard-ab-env={base_python}", "--perfguard-full",
                f"--perfguard-json={folder / 'ab.json'}",
                f"--perfguard-report={folder / 'ab.md'}", "--perfguard-fail-on=never",
                "-p", "no:cacheprovider", "-q",
            ]  # fmt: skip
            told = child_environment(Orders(head_python=str(head_python)))
            done = subprocess.run(
                command, cwd=self.root, env=told, capture_output=True, text=True, check=False
            )
            if not (folder / "ab.json").exists():
                tail = " / ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
                raise BisectError(
                    f"measuring {head} beside {base} failed (exit {done.returncode}): {tail}"
                )
            doc = json.loads((folder / "ab.json").read_text(encoding="utf-8"))
        outcome, items = classify(doc.get("comparisons") or [])
        return Step(base, head, outcome, items)


def labelled(package: str, versions: Sequence[str]) -> list[str]:
    """How the search names each version (`NAME==VERSION`)."""
    return [f"{package}=={v}" for v in versions]
