"""Where the memory went: a memory verdict explained by the allocation sites that changed.

Beside the time's "why" (`stats.why`: operators by self time), for memory: where a peak
memory verdict stands (or memory growth per call), both trees measured the item once more
with allocation recording (`measure.memory_sites`); their sites at each side's peak are
matched by (frame, operator) and the largest changes kept on the comparison (`sites`). For a
leak, the sites of the blocks a call left allocated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from difflib import SequenceMatcher

from perfguard.records import Comparison, VariantResult
from perfguard.records.sites import Site, SiteChange

PEAK, GROWTH = "peak_memory_bytes", "memory_growth_bytes_per_call"
LEAST_BYTES = 64 * 1024  # a peak's site that moved by less is not shown (CPU sizes are exact)
# a leak's site is shown at any size: growth per call is an exact count, and a block of a few
# KiB kept per call is gigabytes after a day of serving
LEAST_HELD_BYTES = 1


def explained(c: Comparison) -> bool:
    """Whether `c` is a memory verdict that stands (what allocation sites explain)."""
    if c.metric == PEAK:  # gating or reported only (a CPU's RSS): a figure that moved
        return c.verdict in ("regression", "improvement")
    return c.metric == GROWTH and c.verdict == "regression"


def memory_keys(comparisons: Sequence[Comparison]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((c.test, c.variant) for c in comparisons if explained(c)))


def sites_of(result: VariantResult | None, metric: str) -> list[Site]:
    if result is None:
        return []
    key = "memory_sites" if metric == PEAK else "memory_held_sites"
    return [Site.from_json(s) for s in result.details.build.get(key) or ()]


def with_memory_why(
    comparisons: Sequence[Comparison],
    base: Mapping[tuple[str, str], VariantResult],
    head: Mapping[tuple[str, str], VariantResult],
) -> tuple[Comparison, ...]:
    """Each standing memory verdict with its sites' changes (where both, or the head, were
    recorded)."""
    out = []
    for c in comparisons:
        key = (c.test, c.variant)
        if explained(c) and key in head:
            least = LEAST_BYTES if c.metric == PEAK else LEAST_HELD_BYTES
            changes = diff(
                sites_of(base.get(key), c.metric), sites_of(head[key], c.metric), least=least
            )
            c = replace(c, sites=tuple(changes))
        out.append(c)
    return tuple(out)


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
                named.place, named.op, before, after,
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
