"""`<baseline-dir>/<machine>/<full sha>.json.gz`: read safely, written atomically, locked.

A baseline is stored compact (no raw samples: `VariantResult.compact`) and gzip-compressed.
Files of older versions, plain `<sha>.json` with every sample, are read as before; a save of
that commit replaces such a file with the compact one.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.files import remove_stale_temp_files, write_bytes_atomic
from perfguard.records import SHA, Run, VariantResult
from perfguard.records.merge import joined_reach
from perfguard.store.months import Window, fold, month_key, month_rows, to_fold
from perfguard.store.run_file import BaselineError, parse_run, read_run_file
from perfguard.store.summary import (
    SUMMARY_DIR,
    Summary,
    SummaryError,
    blob_id,
    concat_parts,
    current,
    frame,
    part_path,
    read_part,
    rows_of,
    write_part,
)

if TYPE_CHECKING:
    import pandas as pd
    from filelock import BaseFileLock


LOCK_NAME = ".perfguard.lock"
SUFFIXES = (".json.gz", ".json")
"""A baseline file's name is `<full sha>` and one of these; a save writes the first."""


def split_name(name: str) -> tuple[str, str] | None:
    """(sha, suffix) of a baseline file's name, or None when it is not one."""
    for suffix in SUFFIXES:
        if name.endswith(suffix) and SHA.match(name[: -len(suffix)]):
            return name[: -len(suffix)], suffix
    return None


def baseline_bytes(run: Run) -> bytes:
    """A baseline file's content: the compact run as JSON, gzip-compressed. The same run
    gives the same bytes (no time stamp in the gzip header), so git stores it once."""
    text = json.dumps(run.compact().to_json(), separators=(",", ":"), allow_nan=False)
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


@dataclass(frozen=True)
class Saved:
    """What a save stored: the file (or an object store's URL), and how the results in it
    came together."""

    path: Path | str
    measured: int  # results of the run being saved
    kept: int = 0  # results kept from the file that was there (not measured this time)
    updated: bool = False  # a baseline of this commit was there before


def merge_into(stored: Run, run: Run) -> tuple[Run, int]:
    """`run` with the results of `stored` that it did not measure; and how many those are.

    A result that is not ok (error, skipped) does not replace an ok one of the same commit:
    one failed attempt must not erase a good measurement of that very code.
    """
    old = {r.key: r for r in stored.results}
    results: list[VariantResult] = []
    kept = 0
    for r in run.results:
        before = old.pop(r.key, None)
        if before is not None and before.status == "ok" and r.status != "ok":
            results.append(before)
            kept += 1
        else:
            results.append(r)
    results.extend(old.values())  # what this run did not measure
    reach = joined_reach([stored.reach, run.reach])  # this run's tests replace the stored's
    return replace(run, results=tuple(results), reach=reach), kept + len(old)


def key_problem(machine: str, commit: str) -> str | None:
    """Why (machine, commit) cannot name a baseline file, or None."""
    if not SHA.match(commit):
        return f"{commit!r} is not a full commit sha"
    return machine_problem(machine)


def machine_problem(machine: str) -> str | None:
    """Why `machine` cannot name a folder of baselines (a path out of it, a hidden one)."""
    if not machine or "/" in machine or "\\" in machine or machine.startswith("."):
        return f"{machine!r} is not a usable machine key (no '/', '\\' or leading '.')"
    return None


@dataclass(frozen=True)
class Compacted:
    """A plain baseline file rewritten compact: the two files (or URLs) and their sizes in
    bytes."""

    old: Path | str
    new: Path | str
    before: int
    after: int


@dataclass(frozen=True)
class BaselineInfo:
    machine: str
    commit: str
    created: str | None
    tests: int
    path: Path | str  # a file, or an object store's URL


class BaselineStore:
    def __init__(self, root: Path, lock_timeout_s: float = 60.0) -> None:
        self.root = Path(root)
        self.lock_timeout_s = lock_timeout_s

    def path(self, machine: str, commit: str) -> Path:
        """Where a save of this commit writes its baseline."""
        problem = key_problem(machine, commit)
        if problem:
            raise BaselineError(problem)
        return self.root / machine / f"{commit}{SUFFIXES[0]}"

    def find(self, machine: str, commit: str) -> Path | None:
        """The stored file of this commit (compressed first, then an older plain one)."""
        path = self.path(machine, commit)
        for suffix in SUFFIXES:
            candidate = path.with_name(f"{commit}{suffix}")
            if candidate.is_file():
                return candidate
        return None

    def _lock(self) -> BaseFileLock:
        from filelock import FileLock  # imported here: `perfguard comment` runs without it

        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / LOCK_NAME), timeout=self.lock_timeout_s)

    def has(self, machine: str, commit: str) -> bool:
        return self.find(machine, commit) is not None

    def load(self, machine: str, commit: str) -> Run | None:
        """The baseline of `commit` on `machine`; None when there is none; error when corrupt."""
        path = self.find(machine, commit)
        return None if path is None else read_run_file(path)

    def save(self, run: Run, *, replace_all: bool = False) -> Saved:
        """Store `run` as the baseline of its commit.

        A baseline of that commit already stored is updated, never shrunk: its results that
        `run` did not measure are kept (`replace_all` replaces the file whole). An unreadable
        file is never replaced, and an empty run is never stored.
        """
        if run.commit is None:
            raise BaselineError("cannot store a baseline without a commit (not a git checkout?)")
        if not run.results:
            raise BaselineError("nothing was measured, so there is nothing to store")
        path = self.path(run.machine, run.commit)
        with self.locked():
            remove_stale_temp_files(path.parent)
            kept = 0
            before = self.find(run.machine, run.commit)
            if before is not None:
                stored = read_run_file(before)  # a corrupt file is evidence: never overwrite it
                if not replace_all:
                    run, kept = merge_into(stored, run)
            content = baseline_bytes(run)
            write_bytes_atomic(path, content)
            if before is not None and before != path:
                before.unlink()  # the older, plain file of the same commit: replaced
            write_part(self.root, run, content)
        return Saved(path, len(run.results) - kept, kept, before is not None)

    def compact(self, machine: str | None = None) -> list[Compacted]:
        """Rewrite every plain `<sha>.json` baseline as a compact `<sha>.json.gz`. A file
        that cannot be read stops it, naming the file (those done before it stay done)."""
        done = []
        with self.locked():
            for _m, f in list(self.files(machine)):
                if not f.name.endswith(".json"):
                    continue
                run = read_run_file(f)
                content = baseline_bytes(run)
                new = f.with_name(f"{f.name.removesuffix('.json')}{SUFFIXES[0]}")
                before = f.stat().st_size
                write_bytes_atomic(new, content)
                f.unlink()
                write_part(self.root, run, content)
                done.append(Compacted(f, new, before, len(content)))
        return done

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the store's lock (saves, prunes and pulls take turns)."""
        from filelock import Timeout

        try:
            with self._lock():
                yield
        except Timeout:
            raise BaselineError(
                f"{self.root / LOCK_NAME}: another perfguard has held the lock for "
                f"{self.lock_timeout_s:g}s; if none is running, delete the lock file"
            ) from None

    def machines(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def files(self, machine: str | None = None) -> Iterator[tuple[str, Path]]:
        """(machine, file) of every stored baseline: one file a commit, the compressed one
        where an older plain file of the same commit is still there."""
        for m in [machine] if machine else self.machines():
            folder = self.root / m
            if not folder.is_dir():
                continue
            chosen: dict[str, Path] = {}
            for f in folder.iterdir():
                named = split_name(f.name)
                if named is not None and f.is_file():
                    sha, suffix = named
                    if sha not in chosen or suffix == SUFFIXES[0]:
                        chosen[sha] = f
            for sha in sorted(chosen):
                yield m, chosen[sha]

    def prune(
        self, keep: int, machine: str | None = None, dry_run: bool = False
    ) -> list[BaselineInfo]:
        """Delete all but the `keep` newest records of each machine; return what went. The
        summary table keeps every commit (history reads it, not the records)."""
        if keep < 0:
            raise BaselineError(f"--keep must be >= 0, got {keep}")
        removed: list[BaselineInfo] = []
        with self.locked():
            for m in [machine] if machine else self.machines():
                infos = sorted(self.list(m), key=lambda i: i.created or "", reverse=True)
                for info in infos[keep:]:
                    if not dry_run:
                        Path(info.path).unlink()  # its row of the summary table stays: history
                    removed.append(info)
        return removed

    def fold_months(self, machine: str | None = None) -> tuple[int, list[str]]:
        """Fold the summary parts of commits without a record into month files, once a
        machine has `months.COMPACT_AT` of them (`perfguard.store.months`): how many were
        folded, and the month files written (paths relative to the folder)."""
        with self.locked():
            recorded = {(m, f.name.split(".", 1)[0]) for m, f in self.files()}
            here = {
                path.relative_to(self.root).as_posix(): path
                for path in (self.root / SUMMARY_DIR).glob(f"{machine or '*'}/*.parquet")
            }
            folding = to_fold(here, recorded)
            if not folding:
                return 0, []

            def existing(paths: list[str]) -> dict[str, bytes]:
                return {p: here[p].read_bytes() for p in paths if p in here}

            folded, written = fold({p: here[p].read_bytes() for p in folding}, existing)
            for path, content in written.items():
                write_bytes_atomic(self.root / path, content)
            for path in folded:
                here[path].unlink()
        return len(folded), sorted(written)

    def history_parts(self, machine: str, shas: list[str], last: int) -> list[pd.DataFrame]:
        """The summary rows of the first `last` of `shas` (newest first) that have a record
        or a part: a record's part where it is current, else made again from the record (and
        written); a part pulled without its record (`baselines pull --for`) as it is, a
        broken one passed over."""
        found: list[pd.DataFrame] = []
        for sha in shas:
            record = self.find(machine, sha)
            if record is not None:
                found.append(folder_part(self.root, machine, record)[0])
            elif (pulled := part_path(self.root, machine, sha)).is_file():
                with contextlib.suppress(SummaryError):
                    found.append(read_part(pulled.read_bytes(), str(pulled)))
            if len(found) == last:
                break
        return found

    def summary(
        self,
        machine: str | None = None,
        metrics: Sequence[str] | None = None,
        window: Window | None = None,
    ) -> Summary:
        """The summary table of every baseline here (`load_summary`)."""
        return load_summary(self.root, machine, metrics, window)

    def list(self, machine: str | None = None) -> list[BaselineInfo]:
        """Every stored baseline; an unreadable one raises, naming the file."""
        out = []
        for m, f in self.files(machine):
            run = read_run_file(f)
            tests = len({r.test for r in run.results})
            sha = split_name(f.name)
            out.append(BaselineInfo(m, sha[0] if sha else f.name, run.created, tests, f))
        return out


def folder_part(root: Path, machine: str, record: Path) -> tuple[pd.DataFrame, bool]:
    """The rows of the baseline `record` (a file under `root`), and whether its part was
    current; a missing or stale part is made again from the record and written."""
    content = record.read_bytes()
    record_id = blob_id(content)
    path = part_path(root, machine, record.name.split(".", 1)[0])
    if path.is_file():
        with contextlib.suppress(SummaryError):  # a broken part is made again below
            part = read_part(path.read_bytes(), str(path))
            if current(part, record_id):
                return part, True
    run = parse_run(content, str(record))
    write_part(root, run, content)
    return frame(rows_of(run, record_id)), False


def load_summary(
    root: Path,
    machine: str | None = None,
    metrics: Sequence[str] | None = None,
    window: Window | None = None,
) -> Summary:
    """The table of every baseline under `root` (the rows of `metrics` alone, when given):
    each record's part, made again (and written) where it is missing or stale, the parts of
    records that retention removed, and the month files' rows of the rest. A broken record
    is left out and named in `skipped`, as `baselines pull` leaves it. With a `window`, only
    its commits' files and the month files that may hold them are read."""
    tables, used, rebuilt, skipped = [], 0, 0, []
    files = list(BaselineStore(root).files(machine))
    if window is not None:
        files = [(m, f) for m, f in files if window.holds(f.name.split(".", 1)[0])]
    for m, f in files:
        try:
            table, was_current = folder_part(root, m, f)
        except BaselineError as exc:  # one broken record must not stop a year of history
            skipped.append(str(exc).splitlines()[0])
            continue
        tables.append(table)
        used += was_current
        rebuilt += not was_current
    # the parts of records that retention removed: the summary keeps every commit
    own = {(m, f.name.split(".", 1)[0]) for m, f in files}
    months = []
    for path in sorted((root / SUMMARY_DIR).glob(f"{machine or '*'}/*.parquet")):
        key = (path.parent.name, path.stem)
        if (month := month_key(f"{SUMMARY_DIR}/{key[0]}/{path.name}")) is not None:
            if window is None or window.may_hold(month[1]):
                months.append(path)
        elif key not in own and (window is None or window.holds(key[1])):
            with contextlib.suppress(SummaryError):  # nothing to make it again from
                tables.append(read_part(path.read_bytes(), str(path)))
                own.add(key)
                used += 1
    found, unread = month_rows(((str(p), p.read_bytes()) for p in months), metrics, own, window)
    tables += found
    used += len(found)
    skipped += unread
    return Summary(concat_parts(tables, metrics), used, rebuilt, tuple(skipped))
