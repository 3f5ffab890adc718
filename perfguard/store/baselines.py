"""`<baseline-dir>/<machine>/<full sha>.json`: read safely, written atomically, locked."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from perfguard.records import RecordError, Run
from perfguard.store.schema import SchemaError, upgrade

SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
LOCK_NAME = ".perfguard.lock"


class BaselineError(Exception):
    """A baseline or results file that cannot be used; the message names the file."""


def read_run_file(path: Path) -> Run:
    """Read a results or baseline file; raise `BaselineError` naming it. Never modifies it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: cannot be read ({exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        complete = text.rstrip().endswith(("}", "]"))
        hint = (
            "it is not valid JSON"
            if complete or not text.lstrip().startswith("{")
            else "it looks truncated"
        )
        raise BaselineError(
            f"{path}: {hint} ({exc.msg} at line {exc.lineno}); move it aside and measure "
            "that commit again with --perfguard-save"
        ) from None
    try:
        return Run.from_json(upgrade(doc))
    except SchemaError as exc:
        raise BaselineError(f"{path}: {exc}") from None
    except RecordError as exc:
        raise BaselineError(
            f"{path}: not a perfguard results file ({exc}); move it aside or delete it"
        ) from None


def write_json_atomic(path: Path, data: object) -> None:
    """Write `data` as JSON, all or nothing (see `write_bytes_atomic`)."""
    write_bytes_atomic(path, (json.dumps(data, indent=1) + "\n").encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same folder, fsync, rename, fsync the folder: all or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@dataclass(frozen=True)
class BaselineInfo:
    machine: str
    commit: str
    created: str | None
    tests: int
    path: Path


class BaselineStore:
    def __init__(self, root: Path, lock_timeout_s: float = 60.0) -> None:
        self.root = Path(root)
        self.lock_timeout_s = lock_timeout_s

    def path(self, machine: str, commit: str) -> Path:
        if not SHA.match(commit):
            raise BaselineError(f"{commit!r} is not a full commit sha")
        if not machine or "/" in machine or machine.startswith("."):
            raise BaselineError(f"{machine!r} is not a usable machine key")
        return self.root / machine / f"{commit}.json"

    def _lock(self) -> FileLock:
        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / LOCK_NAME), timeout=self.lock_timeout_s)

    def has(self, machine: str, commit: str) -> bool:
        return self.path(machine, commit).is_file()

    def load(self, machine: str, commit: str) -> Run | None:
        """The baseline of `commit` on `machine`; None when there is none; error when corrupt."""
        path = self.path(machine, commit)
        if not path.exists():
            return None
        return read_run_file(path)

    def save(self, run: Run) -> Path:
        """Store `run` as the baseline of its commit. Refuses to replace an unreadable file."""
        if run.commit is None:
            raise BaselineError("cannot store a baseline without a commit (not a git checkout?)")
        path = self.path(run.machine, run.commit)
        try:
            with self._lock():
                if path.exists():
                    read_run_file(path)  # a corrupt file is evidence: never overwrite it
                write_json_atomic(path, run.to_json())
        except Timeout:
            raise BaselineError(
                f"{self.root / LOCK_NAME}: another perfguard has held the lock for "
                f"{self.lock_timeout_s:g}s; if none is running, delete the lock file"
            ) from None
        return path

    def machines(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def files(self, machine: str | None = None) -> Iterator[tuple[str, Path]]:
        for m in [machine] if machine else self.machines():
            folder = self.root / m
            if folder.is_dir():
                for f in sorted(folder.glob("*.json")):
                    if SHA.match(f.stem):
                        yield m, f

    def prune(
        self, keep: int, machine: str | None = None, dry_run: bool = False
    ) -> list[BaselineInfo]:
        """Delete all but the `keep` newest baselines of each machine; return what went."""
        if keep < 0:
            raise BaselineError(f"--keep must be >= 0, got {keep}")
        removed: list[BaselineInfo] = []
        with self._lock():
            for m in [machine] if machine else self.machines():
                infos = sorted(self.list(m), key=lambda i: i.created or "", reverse=True)
                for info in infos[keep:]:
                    if not dry_run:
                        info.path.unlink()
                    removed.append(info)
        return removed

    def list(self, machine: str | None = None) -> list[BaselineInfo]:
        """Every stored baseline; an unreadable one raises, naming the file."""
        out = []
        for m, f in self.files(machine):
            run = read_run_file(f)
            tests = len({r.test for r in run.results})
            out.append(BaselineInfo(m, f.stem, run.created, tests, f))
        return out
