# long module: one class, the folder store's methods over S3's calls; split, the parts would share
# its private listing, ETags and conditional writes
"""Baselines in an object store: `s3://bucket/prefix`, the same layout as a folder.

    <prefix>/<machine>/<full sha>.json.gz
    <prefix>/.summary/<machine>/<full sha>.parquet

A team whose baselines outgrow a git branch names a URL where it would name the folder
(`--perfguard-baseline-dir`, `perfguard baselines|history|site --dir`). Nothing is mirrored:
a run lists the machine's records (one request per 1,000), reads the one record it compares
with and the summary parts of its recent history, and writes its own record and part.

The guarantees are the folder's. A write is one PUT, which the store applies whole or not at
all. Two jobs that save the same commit at once (shards of one run) both keep their results:
a save reads the record and its ETag, merges, and writes only if the record is still the one
it read (S3's conditional `If-Match`, or `If-None-Match: *` for a new record); when another
save landed first, it reads again and merges again. A summary part is written after its
record and checked against it, so the last writer leaves a part that matches the record.

Conditional writes are what S3 (and S3-compatible servers: MinIO, Cloudflare R2, Ceph)
offer; through fsspec they are written here for `s3://` alone, so other fsspec URLs (`gs://`,
`az://`) are read but refuse a write, naming why. A `file://` URL is a folder.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.records import Run
from perfguard.store.baselines import (
    SUFFIXES,
    BaselineInfo,
    BaselineStore,
    Compacted,
    Saved,
    baseline_bytes,
    key_problem,
    merge_into,
)
from perfguard.store.months import Window, fold, month_key, month_rows, to_fold
from perfguard.store.run_file import BaselineError, parse_run
from perfguard.store.summary import (
    OLD_LAYOUT,
    SUMMARY_DIR,
    Summary,
    SummaryError,
    blob_id,
    concat_parts,
    frame,
    part_bytes,
    read_part,
    rows_of,
)
from perfguard.store.sync import records_by_key, summary_key

if TYPE_CHECKING:
    import pandas as pd

WRITABLE = ("s3", "s3a")
"""The fsspec protocols whose conditional writes this module makes (S3's If-Match)."""


def open_store(where: str | Path) -> BaselineStore | ObjectStore:
    """The store at a location that `location.location` gave."""
    return ObjectStore(where) if isinstance(where, str) else BaselineStore(where)


class ObjectStoreError(BaselineError):
    """An object store that cannot be used as asked; the message says why and what to do."""


class _Conflict(Exception):
    """A conditional write found the object changed since it was read."""


@dataclass(frozen=True)
class Entry:
    """One object of the store: its path under the prefix and its ETag."""

    path: str
    etag: str


CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
REQUEST_ATTEMPTS = 3
"""An S3 request waits at most 10 s to connect and 30 s for each answer, and is tried at
most 3 times (botocore's standard retries, with backoff; s3fs's own retries off, which
multiplied botocore's: a store answering in 20 s once made each request take 25 tries and
7 minutes). So one call gives up within about 2 minutes, with one line, and a compare job's
handful of calls fits its 20 minutes."""


def _client_options(protocol: str) -> dict[str, Any]:
    """The S3 client's time limits and retry budget (`CONNECT_TIMEOUT_S` ...); none for the
    other stores fsspec opens (a folder, memory)."""
    if protocol not in ("s3", "s3a"):
        return {}
    return {
        "config_kwargs": {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "read_timeout": READ_TIMEOUT_S,
            "retries": {"total_max_attempts": REQUEST_ATTEMPTS, "mode": "standard"},
        },
    }


class ObjectStore:
    """The baselines under one URL. Same methods as `BaselineStore` where a command uses
    them; paths are the URL's."""

    def __init__(self, url: str, *, attempts: int = 8) -> None:
        self.url = url.rstrip("/")
        self.attempts = attempts
        self.protocol = self.url.split("://", 1)[0].lower()
        try:
            import fsspec

            # a client of its own: credentials and endpoint are read from the environment now
            self.fs, self.prefix = fsspec.core.url_to_fs(
                self.url, skip_instance_cache=True, **_client_options(self.protocol)
            )
            if hasattr(self.fs, "retries"):  # s3fs's own tries, around botocore's: one
                self.fs.retries = 1
        except ImportError as exc:
            package = _package(self.protocol, exc)
            install = "'perfguard[s3]'" if self.protocol in WRITABLE else package
            raise ObjectStoreError(
                f"{self.url}: reading it needs the {package} package, which is not "
                f"installed: pip install {install}"
            ) from None
        except ValueError as exc:  # fsspec: an unknown protocol
            raise ObjectStoreError(f"{self.url}: not a store fsspec knows ({exc})") from None
        except Exception as exc:  # a client that connects as it is made (ftp, sftp) and fails
            raise ObjectStoreError(
                f"{self.url}: cannot be opened ({type(exc).__name__}: {exc}); baselines live "
                "in a folder or an object store (s3://bucket/prefix)"
            ) from None
        self.prefix = self.prefix.rstrip("/")
        self._listing: dict[str, Entry] | None = None
        self._found: dict[tuple[str, str], str] = {}  # records found by asking for them
        self._bucket_checked = False

    @property
    def root(self) -> str:
        return self.url

    def where(self, path: str) -> str:
        """The URL of a path under the prefix (for messages)."""
        return f"{self.url}/{path}"

    # --- the store's calls, with its errors made into one line each

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except (_Conflict, FileNotFoundError, ObjectStoreError):
            raise  # a missing object, a lost race, or already said in one line
        except Exception as exc:  # botocore, aiohttp and fsspec raise many kinds
            raise ObjectStoreError(f"{self.url}: {what} failed: {_reason(exc)}") from None

    def entries(self, refresh: bool = False) -> dict[str, Entry]:
        """Every object under the prefix: path -> entry (listed once, then remembered)."""
        if self._listing is None or refresh:
            self.fs.invalidate_cache()
            try:
                found = self._call("listing", lambda: self.fs.find(self.prefix, detail=True))
            except FileNotFoundError:
                raise self._no_bucket() from None
            cut = len(self.prefix) + 1
            self._listing = {
                name[cut:]: Entry(name[cut:], str(info.get("ETag") or info.get("etag") or ""))
                for name, info in found.items()
                if info.get("type", "file") == "file" and name.startswith(self.prefix + "/")
            }
        return self._listing

    def _no_bucket(self) -> ObjectStoreError:
        return ObjectStoreError(
            f"{self.url}: no such bucket (create it, or check the name and the endpoint: "
            "AWS_ENDPOINT_URL_S3 for an S3-compatible server)"
        )

    def read(self, paths: list[str]) -> dict[str, bytes]:
        """The bytes of `paths` under the prefix, fetched together."""
        if not paths:
            return {}
        got = self._fetch(paths)
        for content in got.values():
            if isinstance(content, BaseException):
                raise content
        return {path: content for path, content in got.items() if isinstance(content, bytes)}

    def _fetch(self, paths: list[str]) -> dict[str, bytes | BaseException]:
        """The bytes of each of `paths` under the prefix, or what reading it raised: one GET
        each, together (fsspec's `cat` would first ask for each object's details)."""
        names = [f"{self.prefix}/{p}" for p in paths]
        count = len(names)
        got = self._call(
            "reading",
            functools.partial(
                self.fs.cat_ranges, names, [None] * count, [None] * count, on_error="return"
            ),
        )
        out: dict[str, bytes | BaseException] = {}
        for path, content in zip(paths, got, strict=True):
            if isinstance(content, FileNotFoundError) or not isinstance(content, BaseException):
                out[path] = content
            else:
                out[path] = ObjectStoreError(
                    f"{self.url}: reading {path} failed: {_reason(content)}"
                )
        return out

    def _info(self, path: str) -> Entry | None:
        self.fs.invalidate_cache(f"{self.prefix}/{path}")
        try:
            info = self._call("reading", lambda: self.fs.info(f"{self.prefix}/{path}"))
        except FileNotFoundError:
            return None
        return Entry(path, str(info.get("ETag") or ""))

    def _put(self, path: str, content: bytes, *, etag: str | bool | None = False) -> str:
        """Write `content` at `path`; return its ETag. `etag`: False writes unconditionally,
        None only if there is no object yet, a string only if the object still has it.
        `_Conflict` when the condition does not hold."""
        if self.protocol not in WRITABLE:
            raise ObjectStoreError(
                f"{self.url}: perfguard writes baselines to s3:// stores only (a save must not "
                f"lose a concurrent one, and the conditional writes that ensure it are made "
                f"for S3's API); {self.protocol}:// is read-only here"
            )
        condition: dict[str, str] = {}
        if etag is None:
            condition = {"IfNoneMatch": "*"}
        elif isinstance(etag, str):
            condition = {"IfMatch": etag}
        name = f"{self.prefix}/{path}"
        try:
            out = self.fs.pipe_file(name, content, **condition)
        except Exception as exc:
            if _is_conflict(exc):
                raise _Conflict(path) from None
            if isinstance(exc, FileNotFoundError):
                raise self._no_bucket() from None
            raise ObjectStoreError(f"{self.url}: writing {path} failed: {_reason(exc)}") from None
        self._forget()
        return str((out or {}).get("ETag") or "")

    def _remove(self, paths: list[str]) -> None:
        if paths:
            names = [f"{self.prefix}/{p}" for p in paths]
            self._call("removing", lambda: self.fs.rm(names))
            self._forget()

    def _forget(self) -> None:
        """After a write: what was listed or found may have changed."""
        self._listing = None
        self._found.clear()

    # --- what `BaselineStore` offers

    def machines(self) -> list[str]:
        return sorted({key[0] for key in self._records()})

    def _records(self, machine: str | None = None) -> dict[tuple[str, str], str]:
        """(machine, sha) -> path of each record (the compressed one first); a stray object
        is not one."""
        found = records_by_key(list(self.entries()))
        return {key: path for key, path in found.items() if machine in (None, key[0])}

    def find(self, machine: str, commit: str) -> str | None:
        """The record of `commit`: from the listing when the store was listed, else by
        asking for the object itself (a run never lists the whole store)."""
        if key_problem(machine, commit) is not None:
            return None
        if self._listing is not None:
            return self._records(machine).get((machine, commit))
        if (machine, commit) in self._found:
            return self._found[(machine, commit)]
        for suffix in SUFFIXES:
            path = f"{machine}/{commit}{suffix}"
            if self._info(path) is not None:
                self._found[(machine, commit)] = path
                return path
        if not self._bucket_checked:  # a mistyped bucket must not read as "no baseline"
            bucket = self.prefix.split("/", 1)[0]
            if not self._call("reading", functools.partial(self.fs.exists, bucket)):
                raise self._no_bucket()
            self._bucket_checked = True
        return None

    def has(self, machine: str, commit: str) -> bool:
        return self.find(machine, commit) is not None

    def load(self, machine: str, commit: str) -> Run | None:
        path = self.find(machine, commit)
        if path is None:
            return None
        try:
            content = self.read([path])[path]
        except FileNotFoundError:
            return None  # removed since the listing (a prune)
        return parse_run(content, self.where(path))

    def save(self, run: Run, *, replace_all: bool = False) -> Saved:
        """Store `run` as its commit's baseline: merged with the stored one (never shrunk),
        written only if that is still the stored one; read, merged and tried again when
        another save landed first."""
        if run.commit is None:
            raise BaselineError("cannot store a baseline without a commit (not a git checkout?)")
        if not run.results:
            raise BaselineError("nothing was measured, so there is nothing to store")
        problem = key_problem(run.machine, run.commit)
        if problem:
            raise BaselineError(problem)
        path = f"{run.machine}/{run.commit}{SUFFIXES[0]}"
        plain = f"{run.machine}/{run.commit}{SUFFIXES[1]}"
        for attempt in range(1, self.attempts + 1):
            entry = self._info(path)
            older = None if entry is not None else self._info(plain)
            merged, kept = run, 0
            before = entry or older
            if before is not None:
                stored = parse_run(self.read([before.path])[before.path], self.where(before.path))
                if not replace_all:
                    merged, kept = merge_into(stored, run)
            content = baseline_bytes(merged)
            try:
                etag = self._put(path, content, etag=entry.etag if entry else None)
            except _Conflict:
                time.sleep(0.05 * attempt)  # another save landed first: merge with it
                continue
            self._write_part(merged, content, path, etag)
            if older is not None:
                self._remove([plain])  # the older, plain record of the commit: replaced
            return Saved(self.where(path), len(merged.results) - kept, kept, before is not None)
        raise ObjectStoreError(
            f"{self.where(path)}: {self.attempts} saves of this commit landed while this one "
            "tried; save again"
        )

    def _write_part(self, run: Run, content: bytes, path: str, etag: str) -> None:
        """Write the summary part of the record just written (`etag`), then make sure the
        record is still that one; if a later save replaced it, write the part of that."""
        for _ in range(self.attempts):
            self._put(_part(run.machine, run.commit or ""), part_bytes(run, blob_id(content)))
            now = self._info(path)
            if now is None or now.etag == etag:
                return
            content = self.read([path])[path]
            run, etag = parse_run(content, self.where(path)), now.etag

    def files(self, machine: str | None = None) -> Iterator[tuple[str, str]]:
        """(machine, path) of every record."""
        for (m, _sha), path in sorted(self._records(machine).items()):
            yield m, path

    def prune(
        self, keep: int, machine: str | None = None, dry_run: bool = False
    ) -> list[BaselineInfo]:
        """Delete all but the `keep` newest records of each machine (the summary stays)."""
        if keep < 0:
            raise BaselineError(f"--keep must be >= 0, got {keep}")
        removed: list[BaselineInfo] = []
        for m in [machine] if machine else self.machines():
            infos = sorted(self.list(m), key=lambda i: i.created or "", reverse=True)
            removed.extend(infos[keep:])
        if not dry_run:
            self._remove([str(info.path).removeprefix(self.url + "/") for info in removed])
        return removed

    def fold_months(self, machine: str | None = None) -> tuple[int, list[str]]:
        """Fold the summary parts of commits without a record into month files, once a
        machine has `months.COMPACT_AT` of them (`perfguard.store.months`): how many were
        folded, and the month files written. Each month file is written before its parts
        are removed, so a reader between the two finds both and reads each commit once."""
        entries = self.entries(refresh=True)
        folding = [
            path
            for path in to_fold(entries, set(self._records()))
            if machine in (None, path.split("/")[1])
        ]
        if not folding:
            return 0, []

        def existing(paths: list[str]) -> dict[str, bytes]:
            return self.read([p for p in paths if p in entries])

        folded, written = fold(self.read(folding), existing)
        for path, content in written.items():
            self._put(path, content)
        self._remove(folded)
        return len(folded), sorted(written)

    def compact(self, machine: str | None = None) -> list[Compacted]:
        """Rewrite every plain `<sha>.json` record as `<sha>.json.gz` (through `save`, so a
        concurrent save of the commit is kept)."""
        done = []
        for _m, path in list(self.files(machine)):
            if not path.endswith(SUFFIXES[1]):
                continue
            content = self.read([path])[path]
            run = parse_run(content, self.where(path))
            saved = self.save(run)
            after = len(baseline_bytes(run))
            done.append(Compacted(self.where(path), saved.path, len(content), after))
        return done

    # --- the summary table

    def history_parts(self, machine: str, shas: list[str], last: int) -> list[pd.DataFrame]:
        """The summary rows of the first `last` of `shas` (newest first) that have a record
        or a part: the parts fetched together, a record read only where its part is missing
        or broken."""
        found: list[pd.DataFrame] = []
        for start in range(0, len(shas), last):
            batch = [sha for sha in shas[start : start + last] if not key_problem(machine, sha)]
            fetched = self._fetch([_part(machine, sha) for sha in batch])
            for content in fetched.values():
                if isinstance(content, ObjectStoreError):
                    raise content  # a refused request (credentials), not a missing part
            got = {p: c for p, c in fetched.items() if isinstance(c, bytes)}
            lost = [sha for sha in batch if _part(machine, sha) not in got]
            if lost:
                self.entries()  # commits without a part: list once, not ask for each
            records = self._records(machine) if lost else {}
            rebuilt = self._parts(
                {
                    (machine, sha): records[(machine, sha)]
                    for sha in lost
                    if (machine, sha) in records
                }
            )[0]
            for sha in batch:
                table = rebuilt.get((machine, sha))
                if (name := _part(machine, sha)) in got:
                    with contextlib.suppress(SummaryError):  # a broken part is passed over
                        table = read_part(got[name], self.where(name))
                if table is not None:
                    found.append(table)
                if len(found) == last:
                    return found
        return found

    def _parts(
        self, wanted: dict[tuple[str, str], str | None], skipped: list[str] | None = None
    ) -> tuple[dict[tuple[str, str], Any], int]:
        """(machine, sha) -> its rows, for each of `wanted` (-> its record's path, or None):
        from its part, else from its record (and the part written again where it can be);
        and how many were made from their record. A broken record raises, or with `skipped`
        is left out and named there."""
        entries = self.entries()
        have = [_part(*key) for key in wanted if _part(*key) in entries]
        content = self.read(have)
        tables: dict[tuple[str, str], Any] = {}
        missing = []
        for key, record in wanted.items():
            path = _part(*key)
            try:
                if path in content:
                    table = read_part(content[path], self.where(path))
                    if record is None or not table.attrs.get(OLD_LAYOUT):
                        tables[key] = table  # (an older layout is made again from its record)
                        continue
            except SummaryError:
                pass
            if record is not None:
                missing.append((key, record))
        records = self.read([record for _, record in missing])
        for key, record in missing:
            try:
                run = parse_run(records[record], self.where(record))
            except BaselineError as exc:
                if skipped is None:
                    raise
                skipped.append(str(exc).splitlines()[0])
                continue
            tables[key] = frame(rows_of(run, blob_id(records[record])))
            if self.protocol in WRITABLE:
                self._put(_part(*key), part_bytes(run, blob_id(records[record])))
        return tables, len(missing) - len(skipped or ())

    def summary(
        self,
        machine: str | None = None,
        metrics: Sequence[str] | None = None,
        window: Window | None = None,
    ) -> Summary:
        """The table of every baseline under the URL (history, site, alert): every part,
        the record of each commit whose part is missing or broken, and the month files'
        rows of the rest. With a `window`, only its commits' objects and the month files
        that may hold them are fetched (one listing, then those alone)."""
        records = self._records(machine)
        entries = self.entries()
        parts = {
            key
            for path in entries
            if (key := summary_key(path)) is not None and machine in (None, key[0])
        }
        months = [
            path
            for path in entries
            if (key := month_key(path)) is not None
            and machine in (None, key[0])
            and (window is None or window.may_hold(key[1]))
        ]
        if window is not None:
            parts = {key for key in parts if window.holds(key[1])}
            records = {key: path for key, path in records.items() if window.holds(key[1])}
        wanted: dict[tuple[str, str], str | None] = {key: None for key in parts}
        wanted.update(records)
        skipped: list[str] = []
        tables, rebuilt = self._parts(wanted, skipped)
        found = list(tables.values())
        content = self.read(months)
        folded, unread = month_rows(
            ((self.where(p), content[p]) for p in months), metrics, set(wanted), window
        )
        table = concat_parts([*found, *folded], metrics)
        used = len(tables) - rebuilt + len(folded)
        return Summary(table, used, rebuilt, (*skipped, *unread))

    def list(self, machine: str | None = None) -> list[BaselineInfo]:
        """Every stored baseline (each record read); an unreadable one raises, naming it."""
        files = list(self.files(machine))
        content = self.read([path for _m, path in files])
        out = []
        for m, path in files:
            run = parse_run(content[path], self.where(path))
            sha = path.split("/")[1].split(".", 1)[0]
            tests = len({r.test for r in run.results})
            out.append(BaselineInfo(m, sha, run.created, tests, self.where(path)))
        return out


def _package(protocol: str, exc: ImportError) -> str:
    """The package that fsspec needs for `protocol` (its registry knows: s3fs, gcsfs...)."""
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return "fsspec"
    known = known_implementations.get(protocol, {}).get("class", "")
    return str(known).split(".")[0] or exc.name or "fsspec"


def _part(machine: str, sha: str) -> str:
    return f"{SUMMARY_DIR}/{machine}/{sha}.parquet"


def _is_conflict(exc: BaseException) -> bool:
    """Whether a failed write is S3's answer to a condition that no longer holds (412
    PreconditionFailed; 409 ConditionalRequestConflict when two conditional writes race)."""
    if isinstance(exc, FileExistsError):
        return True
    seen: BaseException | None = exc
    while seen is not None:
        code = getattr(seen, "response", {}).get("Error", {}).get("Code")
        if code in ("PreconditionFailed", "ConditionalRequestConflict"):
            return True
        seen = seen.__cause__ or seen.__context__
    return "pre-conditions you specified" in str(exc)


def _reason(exc: BaseException) -> str:
    """One line for a store's failure, with what to do where the cause is known."""
    kind = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else kind
    if kind in ("NoCredentialsError", "PartialCredentialsError") or "credentials" in text.lower():
        return (
            f"{text}: no usable credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, or give the runner a role)"
        )
    if isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return f"{text}: access denied (the credentials may not read or write this prefix)"
    return f"{text} ({kind})"
