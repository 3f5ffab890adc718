"""Allocation sites: the bytes live at a call's peak by the code that allocated them, and
how they changed between base and head (the memory verdict's "where the memory went")."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from perfguard.records.base import RecordError, bounded, text, texts

KEPT = 40  # sites a result keeps, largest first
BEFORE = "(allocated before the call: weights, inputs, caches)"
WHERE = re.compile(r"^(.*)\((\d+)\): (.*)$")  # "file(line): function"


@dataclass(frozen=True)
class Site:
    """The bytes live at the peak that one site allocated."""

    where: str  # "file(line): function", or "" where the stack has no frame of the user's
    op: str  # the operator that allocated ("" where none)
    bytes: int
    blocks: int
    frames: tuple[str, ...] = ()  # the frames above `where`, innermost first

    code: str = ""  # the statement's source (CUDA, where frames carry their line)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What matches a site between base and head: its file and function (not the line,
        which moves when lines are added above it), the operator and the statement."""
        found = WHERE.match(self.where)
        file, function = (found.group(1), found.group(3)) if found else (self.where, "")
        return (file, function, self.op, self.code)

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


def grouped(live: Iterable[tuple[int, str, str, tuple[str, ...], str]]) -> list[Site]:
    """(bytes, where, op, frames above, statement) of each live block -> sites, largest
    first."""
    sites: dict[tuple[str, str, str], list[Any]] = {}
    for size, where, op, above, code in live:
        entry = sites.setdefault((where, op, code), [0, 0, above])
        entry[0] += size
        entry[1] += 1
    out = [Site(w, o, int(b), n, tuple(a), c) for (w, o, c), (b, n, a) in sites.items()]
    return sorted(out, key=lambda s: (-s.bytes, s.where, s.op))[:KEPT]


@dataclass(frozen=True)
class SiteChange:
    """One site matched between base and head: how its live bytes at the peak changed."""

    where: str
    op: str
    base_bytes: int
    head_bytes: int
    base_blocks: int
    head_blocks: int
    frames: tuple[str, ...]
    kind: str  # "grew", "shrank", "new" (only in head), "gone" (only in base)
    code: str = ""

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
        "where": text(f"{name}.where", found.get("where", "")),
        "op": text(f"{name}.op", found.get("op", "")),
        "frames": texts(f"{name}.frames", found.get("frames")),
        "code": text(f"{name}.code", found.get("code", "")),
    }


def _count(name: str, value: Any) -> int:
    return int(bounded(name, value, int, 0))


def diff(
    base: Sequence[Site], head: Sequence[Site], *, top: int = 8, least: int = 0
) -> list[SiteChange]:
    """The sites whose live bytes changed by more than `least`, named as the head has them
    (its line there), else as the base had them.

    A statement the head edited (same file, function and operator, the code a little
    different: `return out, None` became `return out, kept`) is one site that grew or shrank,
    not one gone and one new of its whole size. The changes that moved the peak the way it
    moved come first (growth when the total grew), largest first: on a GPU the peak's moment
    can move between base and head, so that a temporary live at the base's peak is gone at
    the head's, and that shrink must not be read before the growth that made the peak."""
    b = {s.key: s for s in base}
    h = {s.key: s for s in head}
    pairs: list[tuple[Site | None, Site | None]] = [
        (b.get(key), h.get(key)) for key in dict.fromkeys([*h, *b])
    ]
    pairs = _edited(pairs)
    out = []
    for old, new in pairs:
        before, after = (old.bytes if old else 0), (new.bytes if new else 0)
        if abs(after - before) <= least:
            continue
        if old is None or new is None:
            kind = "new" if old is None else "gone"
        else:
            kind = "grew" if after > before else "shrank"
        named = new or old
        assert named is not None
        out.append(
            SiteChange(
                named.where, named.op, before, after,
                old.blocks if old else 0, new.blocks if new else 0, named.frames, kind,
                named.code,
            )
        )  # fmt: skip
    grew = sum(c.change_bytes for c in out) >= 0
    return sorted(
        out, key=lambda c: ((c.change_bytes > 0) != grew, -abs(c.change_bytes), c.where, c.op)
    )[:top]


SAME_STATEMENT = 0.6
"""How alike (difflib's ratio) a base statement and a head statement of the same function
and operator must be to be taken for one statement the head edited."""


def _edited(
    pairs: list[tuple[Site | None, Site | None]],
) -> list[tuple[Site | None, Site | None]]:
    """`pairs` (base, head by key) with each gone site joined to the new site of the same
    file, function and operator whose statement is most like its own (at least
    SAME_STATEMENT alike), the likest first."""
    gone = [i for i, (old, new) in enumerate(pairs) if new is None and old is not None and old.code]
    made = [j for j, (old, new) in enumerate(pairs) if old is None and new is not None and new.code]
    scored = sorted(
        (
            (SequenceMatcher(None, g.code, n.code).ratio(), i, j)
            for i in gone
            for j in made
            if (g := pairs[i][0]) is not None
            and (n := pairs[j][1]) is not None
            and g.key[:3] == n.key[:3]
        ),
        reverse=True,
    )
    joined: dict[int, int] = {}  # a gone pair's index -> its new pair's
    for ratio, i, j in scored:
        if ratio >= SAME_STATEMENT and i not in joined and j not in joined.values():
            joined[i] = j
    used = {*joined, *joined.values()}
    return [
        *(pair for k, pair in enumerate(pairs) if k not in used),
        *((pairs[i][0], pairs[j][1]) for i, j in joined.items()),
    ]
