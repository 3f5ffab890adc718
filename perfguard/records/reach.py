"""What each perf test ran, as a full run recorded it: the record a pull request's partial
run selects against.

For each test (the test function's node id, every variant and parameter together): the
blocks of repository code it executed (a function's body, or a module's own code; each with
its checksum at the recorded commit, `perfguard.selection.blocks`), the files it depends on
whole (files it opened, modules loaded before recording began, its conftest chain), and the
folders its modules lie in (a new file there may be loaded by a package that lists its own
folder). The files and blocks are one table per record, which the tests index; what every
test shares is written once (`common`). From format 2, each test also keeps the folders it
listed (a new file there may be loaded by name from the listing: a registry, a plugin
folder) and the installed distributions whose code it ran (perfguard's own and pytest's
aside): a pin bump of one moves the tests that ran it, and no other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from perfguard.records.base import RecordError, text, texts

FORMAT = 2
"""The record's own layout (within the results format's `schema_version`): 2 adds each
test's `listed` folders and `distributions`; a format-1 record reads with neither (a new file
in a package then reaches the tests that ran code there, and any pin bump every test)."""


@dataclass(frozen=True, kw_only=True)
class Footprint:
    """One test's reach: indices into its record's tables, and folders."""

    blocks: frozenset[int] = frozenset()  # into Reach.blocks
    files: frozenset[int] = frozenset()  # into Reach.files: whole-file dependencies
    packages: frozenset[str] = frozenset()  # rootdir-relative folders of the modules it ran
    listed: frozenset[str] = frozenset()  # rootdir-relative folders it listed (format 2)
    distributions: frozenset[str] = frozenset()  # installed ones whose code it ran (format 2)

    def _combined(self, other: Footprint, how: Any) -> Footprint:
        return Footprint(**{f: how(getattr(self, f), getattr(other, f)) for f in _FIELDS})

    def __or__(self, other: Footprint) -> Footprint:
        return self._combined(other, frozenset.__or__)

    def __sub__(self, other: Footprint) -> Footprint:
        return self._combined(other, frozenset.__sub__)

    def __and__(self, other: Footprint) -> Footprint:
        return self._combined(other, frozenset.__and__)

    def to_json(self) -> dict[str, Any]:
        return {f: sorted(getattr(self, f)) for f in _FIELDS}

    @classmethod
    def from_json(cls, data: Any, where: str, blocks: int, files: int) -> Footprint:
        if not isinstance(data, Mapping):
            raise RecordError(f"{where} must be an object, got {data!r}")
        return cls(
            blocks=frozenset(_indices(f"{where}.blocks", data.get("blocks"), blocks)),
            files=frozenset(_indices(f"{where}.files", data.get("files"), files)),
            packages=frozenset(texts(f"{where}.packages", data.get("packages"))),
            listed=frozenset(texts(f"{where}.listed", data.get("listed"))),
            distributions=frozenset(texts(f"{where}.distributions", data.get("distributions"))),
        )


_FIELDS = ("blocks", "files", "packages", "listed", "distributions")


def _indices(where: str, value: Any, size: int) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise RecordError(f"{where} must be a list, got {value!r}")
    for i in value:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < size:
            raise RecordError(f"{where} holds {i!r}, not an index below {size}")
    return list(value)


@dataclass(frozen=True, kw_only=True)
class Reach:
    """A run's record of what each perf test ran (see the module's docstring)."""

    files: tuple[tuple[str, str], ...] = ()  # (rootdir-relative path, checksum of its bytes)
    blocks: tuple[tuple[int, str, str], ...] = ()  # (file index, block name, checksum)
    tests: Mapping[str, Footprint] = field(default_factory=dict)
    distributions: tuple[str, ...] = ()  # installed distributions the recorded code imported
    format: int = FORMAT  # 1: no test's listings or distributions were recorded

    def __post_init__(self) -> None:
        object.__setattr__(self, "tests", dict(self.tests))
        for i, _name, _sum in self.blocks:
            if not 0 <= i < len(self.files):
                raise RecordError(f"reach.blocks names file {i}, not one of {len(self.files)}")

    def file(self, index: int) -> str:
        return self.files[index][0]

    def block(self, index: int) -> tuple[str, str, str]:
        """(path, block name, checksum)."""
        i, name, sums = self.blocks[index]
        return self.files[i][0], name, sums

    def merged(self, other: Reach) -> Reach:
        """This record and `other` as one (another shard's, or a later save's): the tables
        joined, `other`'s tests replacing these where both have one."""
        builder = ReachBuilder()
        for reach in (self, other):
            for test, r in reach.tests.items():
                builder.add_test(test, reach, r)
        builder.distributions.update(self.distributions)
        builder.distributions.update(other.distributions)
        return replace(builder.build(), format=min(self.format, other.format))

    def to_json(self) -> dict[str, Any]:
        """The record, with what every test shares written once (`common`)."""
        reaches = list(self.tests.values())
        common = Footprint()
        if reaches:
            common = reaches[0]
            for r in reaches[1:]:
                common = common & r
        return {
            "format": self.format,
            "files": [list(f) for f in self.files],
            "blocks": [list(b) for b in self.blocks],
            "distributions": list(self.distributions),
            "common": common.to_json(),
            "tests": {t: (r - common).to_json() for t, r in sorted(self.tests.items())},
        }

    @classmethod
    def from_json(cls, data: Any) -> Reach:
        if not isinstance(data, Mapping):
            raise RecordError(f"reach must be an object, got {data!r}")
        if data.get("format") not in (1, FORMAT):
            raise RecordError(f"reach.format {data.get('format')!r} is not 1 or {FORMAT}")
        files = tuple(_pair("reach.files", f) for f in _list("reach.files", data.get("files")))
        blocks = tuple(
            _block("reach.blocks", b, len(files)) for b in _list("reach.blocks", data.get("blocks"))
        )
        tests = data.get("tests") or {}
        if not isinstance(tests, Mapping):
            raise RecordError(f"reach.tests must be an object, got {tests!r}")
        common = Footprint.from_json(
            data.get("common") or {}, "reach.common", len(blocks), len(files)
        )
        return cls(
            files=files,
            blocks=blocks,
            format=int(data["format"]),
            distributions=texts("reach.distributions", data.get("distributions")),
            tests={
                text("reach.tests key", t): common
                | Footprint.from_json(r, f"reach.tests[{t!r}]", len(blocks), len(files))
                for t, r in tests.items()
            },
        )


def _list(where: str, value: Any) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise RecordError(f"{where} must be a list, got {value!r}")
    return value


def _pair(where: str, value: Any) -> tuple[str, str]:
    if not (isinstance(value, list | tuple) and len(value) == 2):
        raise RecordError(f"{where}[] must be [path, checksum], got {value!r}")
    return text(f"{where}[].path", value[0]), text(f"{where}[].checksum", value[1])


def _block(where: str, value: Any, files: int) -> tuple[int, str, str]:
    if not (isinstance(value, list | tuple) and len(value) == 3):
        raise RecordError(f"{where}[] must be [file, name, checksum], got {value!r}")
    i = value[0]
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < files:
        raise RecordError(f"{where}[] names file {i!r}, not one of {files}")
    return i, text(f"{where}[].name", value[1]), text(f"{where}[].checksum", value[2])


@dataclass
class ReachBuilder:
    """Builds a record test by test, sharing one table of files and blocks."""

    _files: dict[str, int] = field(default_factory=dict)
    _file_sums: list[str] = field(default_factory=list)
    _blocks: dict[tuple[int, str], int] = field(default_factory=dict)
    _block_sums: list[str] = field(default_factory=list)
    tests: dict[str, Footprint] = field(default_factory=dict)
    distributions: set[str] = field(default_factory=set)

    def file(self, path: str, sums: str) -> int:
        if path not in self._files:
            self._files[path] = len(self._file_sums)
            self._file_sums.append(sums)
        return self._files[path]

    def block(self, path: str, file_sums: str, name: str, sums: str) -> int:
        key = (self.file(path, file_sums), name)
        if key not in self._blocks:
            self._blocks[key] = len(self._block_sums)
            self._block_sums.append(sums)
        return self._blocks[key]

    def add(
        self,
        test: str,
        *,
        blocks: Iterable[int] = (),
        files: Iterable[int] = (),
        packages: Iterable[str] = (),
        listed: Iterable[str] = (),
        distributions: Iterable[str] = (),
    ) -> None:
        """Add to `test`'s reach (indices from `file` and `block`)."""
        more = Footprint(
            blocks=frozenset(blocks),
            files=frozenset(files),
            packages=frozenset(packages),
            listed=frozenset(listed),
            distributions=frozenset(distributions),
        )
        self.tests[test] = self.tests.get(test, Footprint()) | more

    def add_test(self, test: str, source: Reach, r: Footprint) -> None:
        """`test`'s reach as `source` records it, replacing what this builder had of it."""
        self.tests.pop(test, None)
        files = [self.file(*source.files[i]) for i in r.files]
        blocks = [
            self.block(*source.files[source.blocks[b][0]], source.blocks[b][1], source.blocks[b][2])
            for b in r.blocks
        ]
        self.add(
            test,
            blocks=blocks,
            files=files,
            packages=r.packages,
            listed=r.listed,
            distributions=r.distributions,
        )

    def build(self) -> Reach:
        paths = list(self._files)
        return Reach(
            files=tuple(zip(paths, self._file_sums, strict=True)),
            blocks=tuple((i, name, self._block_sums[n]) for (i, name), n in self._blocks.items()),
            tests=dict(self.tests),
            distributions=tuple(sorted(self.distributions)),
        )
