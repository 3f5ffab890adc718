"""Allocation sites: the bytes live at a call's peak by the code that allocated them, and
how they changed between base and head (the memory verdict's "where the memory went").

The records only: a site's place is typed (file, line, function); the file writes it as one
string, "file(line): function", as the profiler and the report name a frame. Which sites are
one site between base and head is the comparison's (`stats.memory_why`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfguard.records.base import RecordError, bounded, text, texts

KEPT = 40  # sites a result keeps, largest first
BEFORE = "(allocated before the call: weights, inputs, caches)"
WHERE = re.compile(r"^(.*)\((\d+)\): (.*)$")  # "file(line): function"


@dataclass(frozen=True)
class Place:
    """Where a site's bytes were allocated: a frame (its file, line and function), or only a
    label where there is none (`BEFORE`; "" where the stack has no frame of the user's)."""

    file: str
    line: int | None = None
    function: str = ""

    @classmethod
    def parse(cls, where: str) -> Place:
        """A place from its written form, "file(line): function" (else a label)."""
        found = WHERE.match(where)
        if found is None:
            return cls(where)
        return cls(found.group(1), int(found.group(2)), found.group(3))

    def __str__(self) -> str:
        return self.file if self.line is None else f"{self.file}({self.line}): {self.function}"


@dataclass(frozen=True)
class Site:
    """The bytes live at the peak that one site allocated."""

    place: Place
    op: str  # the operator that allocated ("" where none)
    bytes: int
    blocks: int
    frames: tuple[str, ...] = ()  # the frames above `where`, innermost first

    code: str = ""  # the statement's source (CUDA, where frames carry their line)

    @property
    def where(self) -> str:
        return str(self.place)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What matches a site between base and head: its file and function (not the line,
        which moves when lines are added above it), the operator and the statement."""
        return (self.place.file, self.place.function, self.op, self.code)

    def to_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "op": self.op,
            "bytes": self.bytes,
            "blocks": self.blocks,
            "frames": list(self.frames),
            **({"code": self.code} if self.code else {}),
        }

    @classmethod
    def from_json(cls, data: Any, name: str = "site") -> Site:
        """A site read from a file; RecordError names the field that is wrong."""
        found = _object(name, data)
        return cls(
            **_place(name, found),
            bytes=_count(f"{name}.bytes", found.get("bytes", 0)),
            blocks=_count(f"{name}.blocks", found.get("blocks", 0)),
        )


@dataclass(frozen=True)
class SiteChange:
    """One site matched between base and head: how its live bytes at the peak changed."""

    place: Place
    op: str
    base_bytes: int
    head_bytes: int
    base_blocks: int
    head_blocks: int
    frames: tuple[str, ...]
    kind: str  # "grew", "shrank", "new" (only in head), "gone" (only in base)
    code: str = ""

    @property
    def where(self) -> str:
        return str(self.place)

    @property
    def change_bytes(self) -> int:
        return self.head_bytes - self.base_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "op": self.op,
            "base_bytes": self.base_bytes,
            "head_bytes": self.head_bytes,
            "change_bytes": self.change_bytes,
            "base_blocks": self.base_blocks,
            "head_blocks": self.head_blocks,
            "frames": list(self.frames),
            "kind": self.kind,
            **({"code": self.code} if self.code else {}),
        }

    @classmethod
    def from_json(cls, data: Any, name: str = "sites[]") -> SiteChange:
        """A site's change read from a file; RecordError names the field that is wrong."""
        found = _object(name, data)
        return cls(
            **_place(name, found),
            base_bytes=_count(f"{name}.base_bytes", found.get("base_bytes", 0)),
            head_bytes=_count(f"{name}.head_bytes", found.get("head_bytes", 0)),
            base_blocks=_count(f"{name}.base_blocks", found.get("base_blocks", 0)),
            head_blocks=_count(f"{name}.head_blocks", found.get("head_blocks", 0)),
            kind=text(f"{name}.kind", found.get("kind", "")),
        )


def changes_from_json(value: Any) -> tuple[SiteChange, ...]:
    """A comparison's `sites`, read from a file (absent or null: none)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RecordError(f"sites must be a list, got {value!r}")
    return tuple(SiteChange.from_json(c) for c in value)


def _object(name: str, data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise RecordError(f"{name} must be an object, got {data!r}")
    return data


def _place(name: str, found: Mapping[str, Any]) -> dict[str, Any]:
    """What a site and a site's change both say of where it is: the frame, the operator,
    the frames above and the statement."""
    return {
        "place": Place.parse(text(f"{name}.where", found.get("where", ""))),
        "op": text(f"{name}.op", found.get("op", "")),
        "frames": texts(f"{name}.frames", found.get("frames")),
        "code": text(f"{name}.code", found.get("code", "")),
    }


def _count(name: str, value: Any) -> int:
    return int(bounded(name, value, int, 0))
