"""An environment built from a tree's own dependency files, cached by their hash.

Same-job A/B's base side runs in the base's environment when a change alters what gets
installed; `perfguard bisect --package` builds one per version it tries. An environment is a
virtual environment in the cache folder, named by a key: the hash of the tree's dependency
files, the install command, the Python version, the platform, the index settings and
perfguard's own requirements. A key in the cache is used as it is (seconds); a new one is
built there under a lock (two sessions never build one twice), then marked complete; a
folder a killed build left unmarked is built again. The newest `KEEP` environments are kept.

It is built with uv where uv is installed (its cache links wheels instead of copying them:
seconds even with torch), else with `venv` and pip. The install is the team's own command
(ini `perfguard_install`, run in the tree with the environment first on PATH) or the
automatic one (`install.requirements`), and then perfguard's own requirements, so that
perfguard's worker runs there (its code always the head's: `shim`). An install that fails or
runs past its limit raises `EnvironmentBuildError` with the installer's last lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfguard.environments.install import (
    InstallFileError,
    install_files,
    requirements,
)
from perfguard.errors import PerfguardError

KEEP = 4
"""Environments kept in the cache folder (the newest by their last use)."""
COMPLETE = ".perfguard-complete"
"""The file that marks a built environment (its metadata, JSON)."""
LAST_LINES = 12
INDEX_VARIABLES = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_CONSTRAINT",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_CONSTRAINT",
)
"""Where the installers look: part of the key (another index may resolve otherwise)."""

Say = Callable[[str], None]


class EnvironmentBuildError(PerfguardError, RuntimeError):
    """The environment could not be built; the message ends with the installer's last
    lines."""


@dataclass(frozen=True)
class Built:
    """A built (or cached) environment."""

    python: Path  # its interpreter
    folder: Path
    key: str
    installer: str  # uv, pip, or the team's command
    seconds: float  # what building it took now (0.0: it was in the cache)
    sources: tuple[str, ...] = ()  # the dependency files it was built from

    @property
    def cached(self) -> bool:
        return self.seconds == 0.0


def default_cache() -> Path:
    """`$XDG_CACHE_HOME/perfguard/environments` (`~/.cache/...` without it)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "perfguard" / "environments"


def find_uv() -> str | None:
    """uv's executable: the one the `uv` package ships, else one on PATH."""
    try:
        import uv  # type: ignore[import-not-found,unused-ignore]

        found = str(uv.find_uv_bin())
        if Path(found).is_file():
            return found
    except (ImportError, FileNotFoundError, AttributeError):
        pass
    return shutil.which("uv")


def own_requirements() -> list[str]:
    """perfguard's own runtime requirements (no extras): what its worker imports."""
    try:
        found = importlib.metadata.requires("perfguard") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    return sorted(r for r in found if "extra ==" not in r and "extra==" not in r)


CHECK = """
import re, sys
import importlib.metadata as metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    Requirement = None
for line in sys.argv[1:]:
    try:
        if Requirement is None:
            metadata.version(re.split(r"[<>=!~;\\[ ]", line)[0])
            continue
        wanted = Requirement(line)
        if wanted.marker is not None and not wanted.marker.evaluate():
            continue
        have = metadata.version(wanted.name)
        if wanted.specifier and not wanted.specifier.contains(have, prereleases=True):
            print(line)
    except metadata.PackageNotFoundError:
        print(line)
"""
"""Run in an environment's interpreter: the requirements (argv) it does not satisfy."""


def unsatisfied(python: Path, wanted: list[str]) -> list[str]:
    """Those of `wanted` the environment of `python` does not satisfy (what it has, wherever
    its path finds it)."""
    if not wanted:
        return []
    done = subprocess.run(
        [str(python), "-c", CHECK, *wanted], capture_output=True, text=True, check=False
    )
    if done.returncode:
        return list(wanted)
    return [line for line in done.stdout.splitlines() if line.strip()]


def base_interpreter() -> str:
    """The interpreter environments are made from: this one's base (not a venv's shim)."""
    return str(getattr(sys, "_base_executable", None) or sys.executable)


def key_of(tree: Path, install: str | None, uv: str | None) -> tuple[str, tuple[str, ...]]:
    """The cache key of `tree`'s environment, and the dependency files it reads."""
    files = install_files(tree)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.encode() + b"\0" + (tree / path).read_bytes() + b"\0")
    facts = {
        "install": install or "",
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": sysconfig.get_platform(),
        "installer": "uv" if uv else "pip",
        "perfguard": own_requirements(),
        "index": {k: os.environ.get(k, "") for k in INDEX_VARIABLES},
    }
    digest.update(json.dumps(facts, sort_keys=True).encode())
    return digest.hexdigest()[:20], tuple(files)


def environment_for(
    tree: Path,
    cache: Path,
    *,
    install: str | None = None,
    timeout_s: float = 1800.0,
    say: Say = lambda _line: None,
    own: list[str] | None = None,
) -> Built:
    """`tree`'s environment: from the cache, or built there now (see the module). `own`:
    what perfguard's worker needs besides the tree's (default: perfguard's requirements)."""
    from filelock import FileLock

    uv = find_uv()
    key, files = key_of(tree, install, uv)
    cache.mkdir(parents=True, exist_ok=True)
    folder = cache / key
    python = folder / "bin" / "python"
    with FileLock(str(cache / f"{key}.lock")):
        marker = folder / COMPLETE
        if marker.is_file() and python.exists():
            marker.touch()  # its last use, for what the cache keeps
            meta = json.loads(marker.read_text(encoding="utf-8"))
            say(f"environment {key}: in the cache ({meta.get('installer', '?')})")
            return Built(python, folder, key, str(meta.get("installer", "?")), 0.0, files)
        shutil.rmtree(folder, ignore_errors=True)  # a build that was killed
        began = time.monotonic()
        how = "the team's command" if install else ("uv" if uv else "venv and pip")
        say(f"environment {key}: building with {how} from {', '.join(files) or 'no files'}")
        needs = own_requirements() if own is None else own
        installer = _build(tree, folder, install, uv, timeout_s, say, needs)
        seconds = max(time.monotonic() - began, 1e-6)
        marker.write_text(
            json.dumps({"installer": installer, "seconds": seconds, "sources": list(files)}),
            encoding="utf-8",
        )
        say(f"environment {key}: built in {seconds:.0f}s")
    _prune(cache, keep=key)
    return Built(python, folder, key, installer, seconds, files)


def _build(
    tree: Path,
    folder: Path,
    install: str | None,
    uv: str | None,
    timeout_s: float,
    say: Say,
    own: list[str],
) -> str:
    log = folder.with_suffix(".log")
    deadline = time.monotonic() + timeout_s
    run = _Runner(log, deadline, tree, folder)
    try:
        if uv:
            run([uv, "venv", "--quiet", "--seed", "--python", base_interpreter(), str(folder)])
        else:
            run([base_interpreter(), "-m", "venv", str(folder)])
        python = str(folder / "bin" / "python")
        pip = [uv, "pip", "install", "--python", python] if uv else [python, "-m", "pip", "install"]
        if install:
            run(["bash", "-c", install], cwd=tree)
            installer = f"command: {install}"
        elif uv and (tree / "uv.lock").is_file():
            run(
                [uv, "sync", "--frozen", "--project", str(tree)],
                env={"UV_PROJECT_ENVIRONMENT": str(folder)},
            )
            installer = "uv sync"
        else:
            try:
                wanted = requirements(tree)
            except InstallFileError as exc:
                raise EnvironmentBuildError(f"the base's dependency files: {exc}") from None
            listing = folder / "perfguard-requirements.txt"
            listing.write_text(wanted.text(), encoding="utf-8")
            if wanted.lines:
                run([*pip, "-r", str(listing)])
            installer = "uv" if uv else "pip"
        # perfguard's worker runs there too: its own requirements, where the tree's lack them
        missing = unsatisfied(Path(python), own)
        if missing:
            say(f"perfguard's own requirements the base's environment lacks: {', '.join(missing)}")
            run([*pip, *missing])
        return installer
    except EnvironmentBuildError:
        shutil.rmtree(folder, ignore_errors=True)
        raise


class _Runner:
    """Runs the steps of one build, each into its log, within the build's deadline."""

    def __init__(self, log: Path, deadline: float, tree: Path, folder: Path) -> None:
        self.log, self.deadline, self.tree, self.folder = log, deadline, tree, folder

    def __call__(
        self, cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        told = {
            **os.environ,
            "VIRTUAL_ENV": str(self.folder),
            "PATH": f"{self.folder / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            **(env or {}),
        }
        told.pop("PYTHONPATH", None)
        left = self.deadline - time.monotonic()
        with self.log.open("ab") as out:
            out.write(f"$ {' '.join(cmd)}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                cmd,
                cwd=cwd or self.tree,
                env=told,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout=max(left, 1.0))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise EnvironmentBuildError(
                    f"the install ran past its limit ({cmd[0]} {' '.join(cmd[1:3])}; "
                    f"--perfguard-install-timeout): {self.tail()}"
                ) from None
        if code:
            raise EnvironmentBuildError(
                f"{Path(cmd[0]).name} {' '.join(cmd[1:3])} failed (exit code {code}): {self.tail()}"
            )

    def tail(self) -> str:
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return "no output"
        kept = [line.strip() for line in lines if line.strip()][-LAST_LINES:]
        return " | ".join(kept) + f" (log: {self.log})"


def _prune(cache: Path, keep: str) -> None:
    """The newest `KEEP` environments stay (by their last use); older ones go."""
    built = sorted(
        (m.stat().st_mtime, m.parent) for m in cache.glob(f"*/{COMPLETE}") if m.parent.name != keep
    )
    for _when, folder in built[: max(len(built) - (KEEP - 1), 0)]:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.with_suffix(".log").unlink()
