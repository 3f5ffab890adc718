"""The trend site's data, kept so that a push updates the site instead of building it again.

Each test's figures are written in chunk scripts of `CHUNK` commits of main's axis
(`data/<page>-<k>.js`, chunk `k` holding the commits at places `k*CHUNK` up to the next
chunk), and a manifest (`site.json`) says what the site holds: main's commits in the axis'
order, the change points, each test's series and chunks, and how many chunks are settled:
those whose commits are all older than main's newest `SETTLE` (a commit's figures never
change once stored, and a step that old has all the commits after it the search looks at).
An update (`perfguard site --update`, a push) keeps the settled chunks and their change
points as they are and makes the rest again from main's commits after them, with `SPAN`
commits before them for the search to see what came first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.errors import PerfguardError
from perfguard.history.analysis import ChangePoint

if TYPE_CHECKING:
    import numpy as np

    from perfguard.history.series import Series

SITE_FORMAT = 1  # the manifest's and the chunks' layout: another format is built again whole
CHUNK = 250  # commits of main per chunk script
# main's newest commits whose chunks an update makes again: a step older than that has had
# more than three times the 30 commits a side the rank test looks at, and the search's
# stretch of 150 with 50 either side, so it stands as found
SETTLE = 100
SPAN = 60  # commits before the settled part that an update reads, for the search's sake
MANIFEST = "site.json"
DATA = "data"
CHUNK_CALL = "perfguardChunk("  # a chunk script is one call: perfguardChunk(<json>);
Chunk = dict[str, dict[str, list[float]]]  # series id -> field ("y", "lo", "hi") -> values


class SiteStale(PerfguardError):
    """The previous site cannot be brought up to this window (the reason); build it whole."""


def series_id(machine: str, variant: str, metric: str) -> str:
    """A series' name in the chunks (a test's chunks are its own file)."""
    return json.dumps([machine, variant, metric], separators=(",", ":"))


@dataclass
class TestData:
    page: str  # the test's page, `<stem>.html`; its chunks are `data/<stem>-<k>.js`
    chunks: set[int] = field(default_factory=set)
    # variant -> (machine, metric) -> whether the series has a band (its repeats' spread)
    series: dict[str, dict[tuple[str, str], bool]] = field(default_factory=dict)

    @property
    def stem(self) -> str:
        return self.page.removesuffix(".html")

    def to_json(self) -> dict[str, Any]:
        return {
            "page": self.page,
            "chunks": sorted(self.chunks),
            "series": {
                v: [[m, metric, band] for (m, metric), band in sorted(kinds.items())]
                for v, kinds in sorted(self.series.items())
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TestData:
        return cls(
            str(data["page"]),
            {int(k) for k in data["chunks"]},
            {
                str(v): {(str(m), str(metric)): bool(band) for m, metric, band in kinds}
                for v, kinds in data["series"].items()
            },
        )


@dataclass
class SiteData:
    """What a site holds, as its manifest says it."""

    commits: list[str]  # main's measured commits, oldest first: the plots' axis
    how: str  # how their order was found, for the reader
    change_points: list[ChangePoint]  # newest first
    tests: dict[str, TestData]
    settled: int = 0  # chunks kept as they are by an update

    @property
    def kept(self) -> int:
        """The places of the axis an update keeps: the settled chunks'."""
        return min(self.settled * CHUNK, len(self.commits))

    @property
    def key(self) -> str:
        """What names the settled part: a cache of the site is saved under it once more of
        main settles (the count, and the last settled commit: main rewritten, another key)."""
        return f"{self.settled}-{self.commits[self.kept - 1][:12] if self.kept else 'none'}"

    def reads_from(self) -> str | None:
        """The oldest commit an update must read from (the settled part's end, less `SPAN`);
        None where nothing is settled: the whole history."""
        return self.commits[max(self.kept - SPAN, 0)] if self.kept else None

    @property
    def machines(self) -> list[str]:
        return sorted({m for t in self.tests.values() for k in t.series.values() for m, _ in k})

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SITE_FORMAT,
            "chunk": CHUNK,
            "settled": self.settled,
            "key": self.key,
            "how": self.how,
            "commits": self.commits,
            "change_points": [asdict(c) for c in self.change_points],
            "tests": {t: d.to_json() for t, d in sorted(self.tests.items())},
        }


def read_manifest(out: Path) -> SiteData:
    """The manifest of the site in `out`; `SiteStale` when there is none this perfguard can
    update (none, another format, unreadable)."""
    path = out / MANIFEST
    if not path.is_file():
        raise SiteStale(f"no previous site in {out} ({MANIFEST})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != SITE_FORMAT or data.get("chunk") != CHUNK:
            raise SiteStale(f"{path} is of another site format")
        return SiteData(
            [str(c) for c in data["commits"]],
            str(data["how"]),
            [ChangePoint(**c) for c in data["change_points"]],
            {str(t): TestData.from_json(d) for t, d in data["tests"].items()},
            int(data["settled"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SiteStale(f"{path} is unreadable ({exc})") from None


def chunk_path(out: Path, stem: str, k: int) -> Path:
    return out / DATA / f"{stem}-{k}.js"


def write_chunk(out: Path, stem: str, k: int, chunk: Chunk) -> None:
    text = json.dumps({"k": k, "series": chunk}, separators=(",", ":"))  # NaN: a gap, in JS too
    chunk_path(out, stem, k).write_text(f"{CHUNK_CALL}{text});\n", encoding="utf-8")


def advance(previous: SiteData | None, commits: Sequence[str]) -> tuple[list[str], int]:
    """Main's axis after `commits` (a history's, oldest first, read from the `previous`
    site's `reads_from` on) follow its settled part, and the first place made again.
    `SiteStale` where they do not continue it (main rewritten, or read from too late)."""
    window = list(dict.fromkeys(commits))
    if previous is None or not previous.kept:
        return window, 0
    kept = previous.commits[: previous.kept]
    try:
        at = window.index(kept[-1])
    except ValueError:
        raise SiteStale(
            f"main's history read does not hold the site's last settled commit {kept[-1][:10]} "
            "(main was rewritten)"
        ) from None
    if at >= len(kept) or window[: at + 1] != kept[len(kept) - at - 1 :]:
        raise SiteStale(
            "main's measured commits changed under the site (main was rewritten, or an older "
            "commit was measured since)"
        )
    return kept + window[at + 1 :], len(kept)


def settled(length: int, before: int) -> int:
    """The chunks settled on an axis of `length` commits: all of whose commits are older
    than the newest `SETTLE` (never fewer than `before`)."""
    return max(before, (length - SETTLE) // CHUNK)


def chunks_of(
    series: Iterable[Series],
    position: Mapping[str, int],
    length: int,
    start: int,
    scale: Callable[[str], float],
) -> dict[int, Chunk]:
    """The chunks from the one holding place `start` on, of a test's `series`, each field
    scaled for its plot and rounded as `plotted` rounds it."""
    import numpy as np

    out: dict[int, Chunk] = {}
    for s in series:
        if not len(s.commits):
            continue
        at = np.fromiter((position[c] for c in s.commits.tolist()), int, len(s.commits))
        keep = at >= start
        if not keep.any():
            continue
        at = at[keep]
        fields = {"y": s.values[keep]}
        if len(s.low):
            fields["lo"] = s.low[keep]
            fields["hi"] = highs(s)[keep]
        sid = series_id(s.machine, s.variant, s.metric)
        ks = at // CHUNK
        for k in np.unique(ks).tolist():
            lo, hi = np.searchsorted(ks, [k, k + 1])
            size = min(CHUNK, length - k * CHUNK)
            entry = out.setdefault(k, {}).setdefault(sid, {})
            for name, values in fields.items():
                column = np.full(size, np.nan)
                column[at[lo:hi] - k * CHUNK] = values[lo:hi]
                entry[name] = plotted(column, scale(s.metric))
    return out


def highs(s: Series) -> np.ndarray:
    """The top of a series' band: its highs, or its value where it has a low and no high."""
    import numpy as np

    top = s.high if len(s.high) else np.full(len(s.values), np.nan)
    result: np.ndarray = np.where(np.isnan(top) & ~np.isnan(s.low), s.values, top)
    return result


def plotted(values: Sequence[float] | np.ndarray, scale: float) -> list[float]:
    """`values` times `scale`, to six significant digits (a hover shows four): a site of a
    long main is millions of points, and their last digits were half its size."""
    import numpy as np

    v = np.asarray(values, dtype=float) * scale  # NaN stays NaN: a gap
    out = v.copy()
    ok = np.isfinite(v) & (v != 0)
    k = 5 - np.floor(np.log10(np.abs(v[ok])))
    up, down = k >= 0, k < 0  # scaled by an exact power of ten either way
    rounded = np.empty_like(k)
    rounded[up] = np.round(v[ok][up] * 10.0 ** k[up]) / 10.0 ** k[up]
    rounded[down] = np.round(v[ok][down] / 10.0 ** -k[down]) * 10.0 ** -k[down]
    out[ok] = rounded
    return list(out.tolist())
