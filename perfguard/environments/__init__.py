"""The environment as part of the change: what a tree installs (`install`), an environment
built from a tree's own files and cached by their hash (`build`), and this perfguard made
importable from another environment's interpreter (`shim`).

`base_environment` decides where same-job A/B's base side runs: `same` (the running
environment), a given interpreter, or `auto`: an environment built from the base's own
files when the change alters what gets installed, else the running one. Nothing here imports
torch or pytest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfguard.environments.build import (
    Built,
    EnvironmentBuildError,
    Say,
    default_cache,
    environment_for,
    find_uv,
)
from perfguard.environments.install import changed_installs, is_install_file
from perfguard.environments.shim import make_shim
from perfguard.errors import PerfguardError

__all__ = [
    "BaseEnvironment",
    "Built",
    "EnvironmentBuildError",
    "EnvironmentChoiceError",
    "base_environment",
    "default_cache",
    "environment_for",
    "find_uv",
    "interpreter",
    "make_shim",
]


class EnvironmentChoiceError(PerfguardError, ValueError):
    """An environment named that is not one (no interpreter there)."""


@dataclass(frozen=True)
class BaseEnvironment:
    """Where the base side runs: `python` None is the running environment. `why` says so
    in the report; `built` is the environment built for it (None: given or the running one);
    `changed` the dependency files the change altered; `error` why it could not be built
    (the base side is then not measured)."""

    python: Path | None
    why: str
    built: Built | None = None
    changed: tuple[str, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """What a run records of it (`baseline.runs_in`): how the base side's environment
        came to be, and what it cost."""
        how = (
            "failed"
            if self.error
            else "built"
            if self.built
            else "given"
            if self.python
            else "same"
        )
        out: dict[str, Any] = {"how": how, "changed": list(self.changed)}
        if self.python is not None:
            out["python"] = str(self.python)
        if self.built is not None:
            out |= {
                "installer": self.built.installer,
                "seconds": round(self.built.seconds, 3),
                "cached": self.built.cached,
                "key": self.built.key,
            }
        if self.error:
            out["error"] = self.error
        return out


def interpreter(path: str | Path, source: str) -> Path:
    """An environment's interpreter from a path to it or to the environment's folder."""
    given = Path(path).expanduser()
    candidates = (
        [given] if given.is_file() else [given / "bin" / "python", given / "Scripts" / "python.exe"]
    )
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.absolute()
    raise EnvironmentChoiceError(
        f"{source}={path}: no Python interpreter there (give an environment's folder or its "
        "bin/python)"
    )


def base_environment(
    choice: str,
    changed: list[str],
    before: dict[str, str | None],
    after: dict[str, str | None],
    base_tree: Path,
    *,
    cache: Path,
    install: str | None,
    timeout_s: float,
    say: Say,
) -> BaseEnvironment:
    """Where the base side of same-job A/B runs. `choice`: `auto`, `same` or a path (see the
    module); `changed`: the paths the change altered, `before` and `after` the texts of its
    dependency files at the base and now (None: absent); `base_tree`: the base's worktree."""
    if choice == "same":
        return BaseEnvironment(
            None, "the base side runs in this environment (--perfguard-base-env=same)"
        )
    if choice != "auto":
        python = interpreter(choice, "--perfguard-base-env")
        return BaseEnvironment(python, f"the base side runs in {python} (--perfguard-base-env)")
    altered = tuple(changed_installs([p for p in changed if is_install_file(p)], before, after))
    if not altered and not install_command_changed(install, changed):
        return BaseEnvironment(
            None, "the change alters no dependency file: both sides in this environment"
        )
    try:
        built = environment_for(base_tree, cache, install=install, timeout_s=timeout_s, say=say)
    except EnvironmentBuildError as exc:
        return BaseEnvironment(
            None, "the base's environment could not be built", changed=altered, error=str(exc)
        )
    how = (
        "from the cache"
        if built.cached
        else f"built in {built.seconds:.0f}s with {built.installer}"
    )
    why = (
        f"the change alters {', '.join(altered)}: the base side runs in an environment built "
        f"from the base's own files ({how})"
    )
    return BaseEnvironment(built.python, why, built, altered)


def install_command_changed(install: str | None, changed: list[str]) -> bool:
    """A team's install command reads files this module cannot judge: with one, a change to
    any file it names is a dependency change."""
    if not install:
        return False
    return any(Path(p).name in install for p in changed)
