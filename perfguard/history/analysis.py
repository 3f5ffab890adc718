"""The change points of main's history, with their commit ranges: terminal, JSON, Markdown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from perfguard.history.changepoints import DETECTED_METRICS, Detection, Sight, Step, reach
from perfguard.history.searching import steps_of_all
from perfguard.history.series import Ordered, Series
from perfguard.report.format import cell, metric_value, pct, sci

if TYPE_CHECKING:
    import pandas as pd

HISTORY_FORMAT = 3  # the layout of `perfguard history --json` (3: `source`, `low`, `high`, notes)
ACCEPT_NEAR = 2  # series positions either side of a step where its accepting commit may be


@dataclass(frozen=True)
class ChangePoint:
    """A step in one series: it happened after `previous` and by `commit` (both on main)."""

    machine: str
    test: str
    variant: str
    metric: str
    previous: str  # the last commit measured before the step
    commit: str  # the first commit measured after it
    index: int  # of `commit` in the series
    points_after: int  # how many measured commits stand behind the new level
    before: float
    after: float
    change_pct: float
    p_value: float | None
    # a regression a pull request accepted at a commit of the step: "<bound>: <reason> (<by>)"
    accepted: str = ""
    accepted_at: str = ""  # that commit
    # "pair": the commit's change measured beside its parent (main's paired run); "search":
    # found in the series of figures (commits measured alone)
    source: str = "search"
    low: float | None = None  # a pair's interval of the change, in percent, where known
    high: float | None = None
    # what of the environment changed between the two commits ("torch 2.13.0 -> 2.14.0")
    environment: str = ""

    @property
    def kind(self) -> str:
        return "regression" if self.change_pct > 0 else "improvement"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.machine, self.test, self.variant, self.metric)

    @property
    def how(self) -> str:
        """How it was found, for the reader: beside its parent (with the change's interval),
        or by the search over the series."""
        if self.source != "pair":
            return "search over the series"
        if self.low is None or self.high is None:
            return "beside its parent"
        return f"beside its parent ({pct(self.low)} to {pct(self.high)})"

    @property
    def found(self) -> str:
        """How it was found, and with what change of the environment, where one came with it."""
        return self.how + (f"; with {self.environment}" if self.environment else "")

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "kind": self.kind, "range": f"{self.previous}..{self.commit}"}


@dataclass(frozen=True)
class History:
    ordered: Ordered
    series: tuple[Series, ...]
    change_points: tuple[ChangePoint, ...]  # newest first
    settings: Detection
    notes: tuple[str, ...] = ()  # what the reader must know of how the steps were found

    @property
    def commits(self) -> list[str]:
        return [r.commit or "" for r in self.ordered.runs]

    def regressions(self, *, newest: int) -> list[ChangePoint]:
        """Regressions among the `newest` measured commits of main (what an alert is for)."""
        recent = set(_dedupe(self.commits)[-newest:]) if newest > 0 else set()
        return [
            c
            for c in self.change_points
            if c.kind == "regression" and not c.accepted and c.commit in recent
        ]

    def accepted(self, *, newest: int) -> list[ChangePoint]:
        """The regressions among them that a pull request accepted (no alert for those)."""
        recent = set(_dedupe(self.commits)[-newest:]) if newest > 0 else set()
        return [c for c in self.change_points if c.accepted and c.commit in recent]


def _dedupe(commits: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(commits))


def analyze(
    ordered: Ordered,
    series: Sequence[Series],
    settings: Detection | None = None,
    metrics: Sequence[str] = DETECTED_METRICS,
) -> History:
    settings = settings or Detection()
    found: list[ChangePoint] = []
    searched: list[tuple[Series, Sight]] = []
    unpaired: set[str] = set()
    alone_of: list[set[int]] = []
    for s in series:
        if s.metric not in metrics:
            continue
        found.extend(_paired_steps(s, settings))
        alone = _unpaired(s)
        if not alone:
            continue  # every commit of the series has its pair: nothing to search for
        unpaired.update(s.commits[1:].tolist() if not s.pairs else (s.commits[i] for i in alone))
        searched.append((s, reach(s.values, settings)))
        alone_of.append(alone)
    all_steps = steps_of_all([s.values for s, _ in searched], settings)
    for (s, _), steps, alone in zip(searched, all_steps, alone_of, strict=True):
        found.extend(c for c in _searched_steps(s, steps) if c.index in alone)
    notes = _search_notes(searched, unpaired, len(_dedupe([r.commit or "" for r in ordered.runs])))
    by_key = {s.key: s for s in series}
    accepted = _accepted_rows(ordered.table)
    found = [_with_accept(c, by_key[c.key], accepted) for c in found] if accepted else found
    position = {sha: i for i, sha in enumerate(_dedupe([r.commit or "" for r in ordered.runs]))}
    found = _with_environment(found, ordered.table)
    found.sort(key=lambda c: (-position.get(c.commit, -1), c.key))
    return History(ordered, tuple(series), tuple(found), settings, notes)


def _with_environment(found: list[ChangePoint], table: pd.DataFrame | None) -> list[ChangePoint]:
    """Each step with what of the environment changed between its two commits (the runtime,
    the packages the tests ran), from the summary's `environment` of each commit."""
    if table is None or table.empty or "environment" not in table.columns or not found:
        return found
    from perfguard.store.summary import read_environment

    wanted = {sha for c in found for sha in (c.previous, c.commit)}
    rows = table[table["commit"].isin(list(wanted))][["commit", "environment"]]
    texts = dict(rows.drop_duplicates("commit").itertuples(index=False, name=None))
    out = []
    for c in found:
        before = read_environment(str(texts.get(c.previous) or ""))
        after = read_environment(str(texts.get(c.commit) or ""))
        if not before or not after:
            out.append(c)
            continue
        changed = [
            f"{name.lstrip('@')} {before.get(name, 'none')} -> {after.get(name, 'none')}"
            for name in sorted(set(before) | set(after), key=lambda n: (not n.startswith("@"), n))
            if before.get(name) != after.get(name)
        ]
        changed = list(dict.fromkeys(changed))  # torch is a runtime key and a package
        out.append(replace(c, environment=", ".join(changed[:5])) if changed else c)
    return out


def _unpaired(s: Series) -> set[int]:
    """The points of `s` without a paired change: where the search decides. The first
    point has no neighbour to search against; without a pair it has no step."""
    if not s.pairs:
        return set(range(1, len(s.values)))
    return {i for i, pair in enumerate(s.pairs) if pair is None and i > 0}


def _paired_steps(s: Series, settings: Detection) -> list[ChangePoint]:
    """The commits of `s` whose change beside their parent stands, wherever they lie."""
    out = []
    for i, pair in enumerate(s.pairs):
        if pair is None or not pair.stands or abs(pair.change_pct) < settings.min_change_pct:
            continue
        after = float(s.values[i])
        out.append(
            ChangePoint(
                *s.key,
                previous=pair.base,
                commit=s.commits[i],
                index=i,
                points_after=len(s.commits) - i,
                before=after / (1.0 + pair.change_pct / 100.0),
                after=after,
                change_pct=pair.change_pct,
                p_value=pair.p_value,
                source="pair",
                low=pair.low,
                high=pair.high,
            )
        )
    return out


def _searched_steps(s: Series, steps: Sequence[Step]) -> list[ChangePoint]:
    return [
        ChangePoint(
            *s.key,
            previous=s.commits[step.index - 1],
            commit=s.commits[step.index],
            index=step.index,
            points_after=len(s.commits) - step.index,
            before=step.before,
            after=step.after,
            change_pct=step.change_pct,
            p_value=step.p_value,
        )
        for step in steps
    ]


def _search_notes(
    searched: Sequence[tuple[Series, Sight]], unpaired: set[str], commits: int
) -> tuple[str, ...]:
    """What the search over commits measured alone could and could not see."""
    if not searched:
        return ()
    notes = [
        f"{len(unpaired)} of {commits} commit(s) have no change measured beside their parent "
        "(saved with --perfguard-save-unpaired, from a shallow checkout, or before paired "
        "runs): a step at those is looked for in the series of figures instead"
    ]
    short = [s for s, r in searched if r.first is None]
    if short:
        notes.append(
            f"{len(short)} series too short for that search ({max(len(s.values) for s in short)} "
            "commit(s) at most): no step can be found in them without pairs"
        )
    seen = [r for _, r in searched if r.first is not None and r.last is not None]
    if seen:
        n = max(r.n for r in seen)
        widest = max((r for r in seen if r.n == n), key=lambda r: (r.last or 0) - (r.first or 0))
        low, high = min(r.smallest_pct for r in seen), max(r.smallest_pct for r in seen)
        size = f"{low:.1f}%" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}%-{high:.1f}%"
        notes.append(
            f"in a series of {n} commits the search finds a step only with at least "
            f"{widest.first} commits before it and {n - (widest.last or 0)} after it (nearer an "
            f"end its rank test cannot reach max_p), and only of {size} or more (each series' "
            "own noise)"
        )
    return tuple(notes)


def _accepted_rows(table: pd.DataFrame | None) -> dict[tuple[str, str, str, str, str], str]:
    """(machine, commit, test, variant, metric) -> what accepted its regression there."""
    if table is None or table.empty:
        return {}
    rows = table[table["accepted"] != ""]
    keys = ("machine", "commit", "test", "variant", "metric", "accepted")
    return {
        tuple(str(v) for v in row[:5]): str(row[5])  # type: ignore[misc]
        for row in rows[list(keys)].itertuples(index=False)
    }


def _with_accept(
    c: ChangePoint, s: Series, accepted: Mapping[tuple[str, str, str, str, str], str]
) -> ChangePoint:
    """A regression whose step has an accepted regression of its series at a commit within
    `ACCEPT_NEAR` positions (the detected commit may be a neighbour of the merge commit)."""
    if c.kind != "regression":
        return c
    for sha in s.commits[max(1, c.index - ACCEPT_NEAR) : c.index + ACCEPT_NEAR]:
        text = accepted.get((c.machine, sha, c.test, c.variant, c.metric))
        if text:
            return replace(c, accepted=text, accepted_at=sha)
    return c


def to_json(history: History) -> dict[str, object]:
    from perfguard.history.series import dump_json

    return {
        "format": HISTORY_FORMAT,
        "ordered": history.ordered.how,
        "left_out": history.ordered.left_out,
        "commits": _dedupe(history.commits),
        "settings": asdict(history.settings),
        "notes": list(history.notes),
        "change_points": [c.to_json() for c in history.change_points],
        "series": [dump_json(s) for s in history.series],
    }


def _summary(history: History) -> str:
    machines = {s.machine for s in history.series}
    line = (
        f"{len(history.series)} series on {len(machines)} machine(s) over "
        f"{len(_dedupe(history.commits))} commit(s), {history.ordered.how}"
    )
    if history.ordered.left_out:
        line += f"; {history.ordered.left_out} baseline(s) of commits not on it were left out"
    return line


def render_terminal(history: History) -> str:
    lines = [_summary(history), *(f"note: {n}" for n in history.notes)]
    if not history.change_points:
        lines.append("no change points")
        return "\n".join(lines) + "\n"
    lines.append(f"{len(history.change_points)} change point(s), newest first:")
    for c in history.change_points:
        lines.append(
            f"  {c.kind:<11} {pct(c.change_pct):>8}  {c.previous[:10]}..{c.commit[:10]}  "
            f"{c.test} [{c.variant}] {c.metric}  "
            f"{metric_value(c.metric, c.before)} -> {metric_value(c.metric, c.after)}  "
            f"p={sci(c.p_value)}  {c.found}  ({c.points_after} commit(s) since)  {c.machine}"
            + (f"  accepted at {c.accepted_at[:10]}: {c.accepted}" if c.accepted else "")
        )
    return "\n".join(lines).replace("\u00a0", " ") + "\n"


def render_markdown(history: History, *, commit_url: str | None = None) -> str:
    """`commit_url`: a link pattern with `{sha}` (e.g. https://github.com/o/r/commit/{sha})."""
    lines = ["## perfguard: main's history", "", cell(_summary(history)) + ".", ""]
    lines += [*(f"> {cell(n)}." for n in history.notes), *([""] if history.notes else [])]
    if not history.change_points:
        return "\n".join([*lines, "No change points.", ""])
    lines += [
        "| | change | commits | test | variant | metric | before | after | p | found | since |",
        "| --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for c in history.change_points:
        mark = ":red_circle:" if c.kind == "regression" else ":green_circle:"
        if c.accepted:
            mark = f":white_circle: accepted at `{c.accepted_at[:10]}`: {cell(c.accepted)}"
        lines.append(
            f"| {mark} | {pct(c.change_pct)} | {commit_range(c, commit_url)} | {cell(c.test)} | "
            f"{cell(c.variant)} | {c.metric} | {metric_value(c.metric, c.before)} | "
            f"{metric_value(c.metric, c.after)} | {sci(c.p_value)} | {cell(c.found)} | "
            f"{c.points_after} |"
        )
    lines += [
        "",
        "A change point's commits: the step happened after the first and by the second "
        "(`perfguard bisect` finds the one commit when there are several between them). "
        "Found beside its parent: main's run measured that commit beside its first parent "
        "in one job, and the paired change (its interval beside it) stood; by the search: "
        "the commits were measured alone, and the series of their figures stepped there.",
        "",
    ]
    return "\n".join(lines)


def commit_range(c: ChangePoint, commit_url: str | None) -> str:
    def one(sha: str) -> str:
        return f"[`{sha[:10]}`]({commit_url.format(sha=sha)})" if commit_url else f"`{sha[:10]}`"

    return f"{one(c.previous)}..{one(c.commit)}"
