"""A warm compile cache: main's compiled artifacts, loaded where no cold compile is measured.

A compiled variant's cold compile is the figure its compile-time verdict is about, so this
tree's side always compiles in a fresh cache. Everything else compiles the same graphs again:
the base commit's side in same-job A/B, and each confirmation round (two more processes per
flagged item). Those load the artifacts main's run wrote (`torch.compiler.save_cache_artifacts`:
Inductor's FX graphs and AOTAutograd's, autotuning results), and compile from them.

One file per test and variant, in a folder (`--perfguard-compile-cache=DIR`; the workflow keeps
it with `actions/cache`, saved on main only and restored read-only on pull requests, so that a
pull request cannot poison main's cache), named by a key of what the artifacts are valid for:
torch's and Triton's versions, the device's model, the project's lock files, the test and the
variant. A stale file (older code) is harmless: torch keys each artifact by its graph, so a
changed graph misses and compiles cold.

Who does what (`use_for`): main's run (`--perfguard-save`, or the head worker of its paired
run) writes after its cold compile; the base side of an A/B run and confirmation rounds load
(their orders say so); any other run compiles cold and leaves the cache alone.
"""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.files import write_bytes_atomic

if TYPE_CHECKING:
    import torch

LOCK_FILES = (
    "uv.lock",
    "poetry.lock",
    "Pipfile.lock",
    "pdm.lock",
    "requirements.txt",
    "requirements-dev.txt",
    "constraints.txt",
    "pyproject.toml",
)
"""The project files whose change may change what is compiled (their digest is in the key)."""
MAX_FILE_BYTES = 512 * 2**20
"""The largest cache file read (an item's artifacts are KB to tens of MB): a file past it is
not one perfguard wrote for one item, and reading it whole could take the runner's memory."""


def lock_digest(root: Path) -> str:
    """A digest of the project's lock files found at `root` (empty when there are none)."""
    h = hashlib.sha256()
    for name in LOCK_FILES:
        path = root / name
        if path.is_file():
            h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def use_for(
    folder: Path | None, *, saving: bool, told: str | None, root: Path
) -> tuple[Path, str, str] | None:
    """(folder, mode, lock digest) for a measuring session, or None without a cache. Mode
    "load" (the base side of A/B, a confirmation round: `told` so by the session that
    started it), "write" (main's run, and its paired run's head worker), or "cold"."""
    if folder is None:
        return None
    if told in ("load", "write"):
        mode = told
    elif saving:
        mode = "write"
    else:
        mode = "cold"
    return folder, mode, lock_digest(root)


@dataclass(frozen=True)
class CompileCache:
    """One test and variant's artifacts in the cache folder."""

    folder: Path
    mode: str  # "load", "write" or "cold"
    lock: str
    test: str
    variant: str

    def path(self, device: torch.device) -> Path:
        import torch

        triton = None
        try:
            from importlib.metadata import version

            triton = version("triton")
        except Exception:  # no Triton (a CPU build): part of the key all the same
            triton = None
        if device.type == "cuda":
            name = torch.cuda.get_device_name(device)
        else:
            from perfguard.environment import cpu_model

            name = cpu_model()
        key = json.dumps(
            [torch.__version__, triton, name, self.lock, self.test, self.variant],
            separators=(",", ":"),
        )
        return self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.bin"

    def load(self, device: torch.device) -> str | None:
        """Load this item's artifacts into the (fresh) compile caches. None: loaded (a hit);
        else why not, in one line (a miss: compiled cold): no file, one past the size a
        cache file may be, one torch rejects (damaged, truncated, empty, foreign)."""
        import logging

        import torch

        path = self.path(device)
        try:
            found = path.lstat()  # the entry itself: a link is not followed
        except OSError:
            return "no artifacts for this item"
        if not stat.S_ISREG(found.st_mode):
            return f"{path.name} is not a regular file (a link, a pipe, a device): not read"
        size = found.st_size
        if size > MAX_FILE_BYTES:
            return (
                f"{path.name} is {size / 2**20:.0f} MiB, past the {MAX_FILE_BYTES >> 20} MiB a "
                "cache file may be: not read"
            )
        quiet = logging.getLogger("torch.compiler._cache")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # its rejection is said here, in one line
        try:
            info = torch.compiler.load_cache_artifacts(_read_at_most(path, MAX_FILE_BYTES))
        except Exception as exc:  # a damaged or foreign file: compiled cold, as on a miss
            return f"{path.name} could not be loaded ({type(exc).__name__}): compiled cold"
        finally:
            quiet.setLevel(level)
        if info is None:  # torch's word for a file it rejects
            return f"{path.name} was rejected by torch (damaged, truncated or empty): compiled cold"
        return None

    def start(self) -> None:
        """Forget the artifacts compiled before (other items'): what `write` stores is this
        item's alone."""
        from torch.compiler._cache import CacheArtifactManager

        CacheArtifactManager.clear()

    def write(self, device: torch.device) -> bool:
        """Store the artifacts compiled since `start`; whether there were any."""
        import torch

        got = torch.compiler.save_cache_artifacts()
        if not got or not got[0]:
            return False
        try:
            write_bytes_atomic(self.path(device), got[0])
        except OSError:  # a cache that cannot be written costs time, never a result
            return False
        return True


def _read_at_most(path: Path, limit: int) -> bytes:
    """The file's bytes, refusing one that grew past `limit` since it was looked at."""
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path.name} grew past {limit >> 20} MiB while it was read")
    return data
