"""The Markdown report, rendered from the jinja2 templates shipped in this package.

A PR comment holds at most 65,536 characters. `render_markdown` renders everything when it
fits and otherwise degrades step by step (the unchanged table, the full results table, the
charts and environment, then improvements and errors, then the regressions beyond as many as
fit, worst first), always saying what it left out and where the full report is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import jinja2

from perfguard.comment import COMMENT_LIMIT, MARKER
from perfguard.environment_diff import environment_differences, package_changes, runtime_changes
from perfguard.records import Comparison, Run
from perfguard.records.op_times import OpChange
from perfguard.report import format as fmt
from perfguard.report.charts import trend_chart
from perfguard.report.facts import (
    compile_cache_line,
    runs_in_line,
    shape_sweeps,
    speedups,
    trace_files,
)
from perfguard.report.sweeps import find_sweeps, sweep_chart
from perfguard.stats.bars import loosened_of
from perfguard.stats.exact import EXACT_METRICS
from perfguard.stats.op_verdicts import located
from perfguard.stats.verdicts import Thresholds, summarize_verdicts
from perfguard.stats.why import ALL_KERNELS

MAX_CHARTS = 5
KINDS = {"train": " · training step", "generate": " · generation"}
"""How the tables name a result that is not one forward call, after its variant."""


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("perfguard.report", "templates"),
        autoescape=False,  # Markdown, not HTML: every value from data goes through `cell`
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        cell=fmt.cell,
        ms=fmt.ms,
        size=fmt.size,
        seconds=fmt.seconds,
        duration=fmt.duration,
        effect=fmt.effect,
        pct=fmt.pct,
        sci=fmt.sci,
        value=fmt.metric_value,
        speedup=fmt.speedup,
        interval=fmt.interval,
        count=fmt.count,
        rate=fmt.rate,
        percent=fmt.percent,
        rule=fmt.rule,
    )
    # why rows that begin with the kernels' device time (a CUDA run)
    env.tests["device_rows"] = lambda why: bool(why) and why[0][0] == ALL_KERNELS
    return env


def compile_templates() -> None:
    """Parse and compile the report's templates now, not at the first report (a quarter of a
    second of CPU): a process that forks many sessions does it once for all of them."""
    env = _environment()
    for name in env.list_templates():
        env.get_template(name)


def _severity(c: Comparison) -> float:
    return -abs(c.change_pct or 0.0)


def verdict_counts(comparisons: Sequence[Comparison]) -> str:
    """'3 regression, 20 unchanged (+ 12 reported only)': gating verdicts, worst first."""
    counts = summarize_verdicts([c for c in comparisons if c.gating])
    text = ", ".join(f"{counts[v]} {v}" for v in fmt.SEVERITY if v in counts)
    informational = sum(1 for c in comparisons if not c.gating)
    if informational:
        text += f" (+ {informational} reported only, not gating)"
    return text


def headline(run: Run) -> str:
    text = _headline(run)
    if run.accept_error:
        text = f"the accept file could not be read; {text}"
    if run.incomplete:  # first: a run that did not measure what it was asked to never passes
        kinds = ", ".join(dict.fromkeys(g.kind.replace("_", " ") for g in run.incomplete))
        text = f"incomplete run ({kinds}); {text}"
    return text


def _headline(run: Run) -> str:
    counts = summarize_verdicts([c for c in run.comparisons if c.gating])
    errors = sum(1 for r in run.results if r.status == "error")
    gating_ops = [c for c in run.op_comparisons if c.gating and c.verdict == "regression"]
    if counts.get("regression") or gating_ops:
        pairs = {
            (c.test, c.variant) for c in run.comparisons if c.gating and c.verdict == "regression"
        } | {(c.test, c.variant) for c in gating_ops}
        also = f"; {counts['accepted']} change(s) accepted" if counts.get("accepted") else ""
        ops = f" and {len(gating_ops)} in operators or kernels" if gating_ops else ""
        return (
            f"{counts.get('regression', 0)} regression(s){ops} in {len(pairs)} of "
            f"{len(run.results)} test variant(s){also}"
        )
    if counts.get("accepted"):
        return f"no regression; {counts['accepted']} change(s) accepted by this pull request"
    if errors:
        return f"no regression, but {errors} variant(s) failed to measure"
    if run.baseline.commit is None:
        return "measured; no baseline to compare with"
    return "no regression"


@dataclass(frozen=True)
class Detail:
    """How much of each section a rendering shows; None means all of it."""

    regressions: int | None = None
    improvements: int | None = None
    failures: int | None = None
    exact: int | None = None  # rows of the exact signals (their regressions first)
    results: bool = True
    unchanged: bool = True
    environment: bool = True
    charts: int = MAX_CHARTS


def _degrade() -> Iterator[Detail]:
    """Ever smaller renderings; after the last, the regressions are cut to what fits."""
    d = Detail()
    yield d
    d = replace(d, unchanged=False)
    yield d
    d = replace(d, results=False)
    yield d
    d = replace(d, charts=1, environment=False)
    yield d
    d = replace(d, charts=0, improvements=20, failures=20, exact=50)
    yield d
    d = replace(d, improvements=0, failures=5, exact=20)
    yield d


def workflow_run_link() -> str | None:
    """A Markdown link to this GitHub Actions run (its artifacts), or None off Actions."""
    server, repo, run_id = (
        os.environ.get("GITHUB_SERVER_URL"),
        os.environ.get("GITHUB_REPOSITORY"),
        os.environ.get("GITHUB_RUN_ID"),
    )
    if server and repo and run_id:
        return f"[this workflow run]({server}/{repo}/actions/runs/{run_id})"
    return None


def default_full_report_hint() -> str:
    """Where the untrimmed report is: the workflow run's artifacts when on GitHub Actions."""
    link = workflow_run_link()
    return f"the artifacts of {link}" if link else "the full report file next to this one"


def _left_out(detail: Detail, context: dict[str, Any]) -> list[str]:
    out = []
    regressions = context["all_regressions"]
    if detail.regressions is not None and detail.regressions < len(regressions):
        out.append(
            f"{len(regressions) - detail.regressions} of {len(regressions)} regressions "
            "(the mildest)"
        )
    for name, limit in (
        ("improvements", detail.improvements),
        ("failures", detail.failures),
        ("exact", detail.exact),
    ):
        items = context[f"all_{name}"]
        if limit is not None and limit < len(items):
            label = {"failures": "errors and skips", "exact": "exact-signal rows"}.get(name, name)
            out.append(f"{len(items) - limit} of {len(items)} {label}")
    if not detail.results and context["ok_results"]:
        out.append(f"the table of all {len(context['ok_results']):,} results")
    if not detail.unchanged and context["unchanged"]:
        out.append(f"the table of {len(context['unchanged']):,} unchanged and other comparisons")
    if detail.charts < min(len(context["charted"]), MAX_CHARTS):
        out.append("trend charts")
    if not detail.environment:
        out.append("the environment table")
    return out


def render_markdown(
    run: Run,
    thresholds: Thresholds | None = None,
    *,
    limit: int | None = COMMENT_LIMIT,
    full_report: str | None = None,
) -> str:
    """The report; within `limit` characters when one is given (None: everything)."""
    return Rendering(run, thresholds).text(limit, full_report)


class Rendering:
    """One run's report, rendered as often as trimming needs: what the template reads is
    gathered once, and the two tables that grow with the suite (every result, every
    unchanged comparison: tens of thousands of rows) are rendered once each, whichever
    rendering asks first. A trimmed report tries up to a dozen renderings."""

    def __init__(self, run: Run, thresholds: Thresholds | None = None) -> None:
        th = thresholds or Thresholds.from_json(run.settings.get("thresholds"))
        self.run = run
        self.context = _context(run, th)
        self._tables: dict[str, str] = {}

    def _table(self, name: str) -> str:
        if name not in self._tables:
            template = _environment().get_template(f"{name}.md.j2")
            self._tables[name] = template.render(**self.context, detail=Detail())
        return self._tables[name]

    def render(self, detail: Detail, full_report: str | None = None) -> str:
        context = self.context
        regressions, improvements = context["all_regressions"], context["all_improvements"]
        shown = regressions[: detail.regressions]
        return (
            _environment()
            .get_template("report.md.j2")
            .render(
                **context | {"full_report": full_report or default_full_report_hint()},
                detail=detail,
                regressions=shown,
                # the ten-second table holds the regressions shown, never more: with
                # thousands of them it alone outgrew a comment, and every regression was
                # left out
                grouped=_by_test(shown),
                exact=context["all_exact"][: detail.exact],
                improvements=improvements[: detail.improvements],
                failures=context["all_failures"][: detail.failures],
                charts=[
                    trend_chart(c, self.run.commit) for c in context["charted"][: detail.charts]
                ],
                left_out=_left_out(detail, context),
                results_table=self._table("results") if detail.results else _no_table(context),
                unchanged_table=self._table("unchanged") if detail.unchanged else "",
            )
        )

    def text(self, limit: int | None = COMMENT_LIMIT, full_report: str | None = None) -> str:
        """The report within `limit` characters (None: everything)."""
        detail = Detail()
        for detail in _degrade():
            text = self.render(detail, full_report)
            if limit is None or len(text) <= limit:
                return text
        # As many regressions as fit, worst first: the largest count whose rendering fits.
        assert limit is not None
        low, high = 0, len(self.context["all_regressions"])
        best = self.render(replace(detail, regressions=0), full_report)
        while low < high:
            mid = (low + high + 1) // 2
            text = self.render(replace(detail, regressions=mid), full_report)
            if len(text) <= limit:
                low, best = mid, text
            else:
                high = mid - 1
        return best if len(best) <= limit else best[:limit]  # the cut only for absurd limits


def _no_table(context: Mapping[str, Any]) -> str:
    """What stands for the table of all results when a trimmed report leaves it out."""
    results, measured = len(context["run"].results), len(context["ok_results"])
    return (
        f"{fmt.count(results)} results ({fmt.count(measured)} measured); the table is in the "
        "full report.\n"
    )


@dataclass(frozen=True)
class MetricLine:
    """One line of the regressions read in ten seconds: a test's metric, its variants side by
    side, worst first."""

    test: str
    metric: str
    rows: tuple[Comparison, ...]  # worst first

    @property
    def worst(self) -> Comparison:
        return self.rows[0]


def _by_test(regressions: Sequence[Comparison]) -> list[MetricLine]:
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in regressions:  # already worst first
        groups.setdefault((c.test, c.metric), []).append(c)
    return [MetricLine(test, metric, tuple(rows)) for (test, metric), rows in groups.items()]


def _context(run: Run, th: Thresholds) -> dict[str, Any]:
    """What the template reads, everything in it (the degrading picks the shares)."""
    comparisons = run.comparisons
    sweeps = find_sweeps(run.results, comparisons)
    # exact signals first, in a table of their own: certain, and read differently
    exact = [c for c in comparisons if c.metric in EXACT_METRICS and c.verdict != "unchanged"]
    exact.sort(key=lambda c: (c.verdict != "regression", not c.gating, c.test, c.variant))
    measured = [c for c in comparisons if c.metric not in EXACT_METRICS]
    regressions = sorted(
        (c for c in measured if c.verdict == "regression" and c.gating), key=_severity
    )
    improvements = sorted(
        (c for c in measured if c.verdict == "improvement" and c.gating), key=_severity
    )
    accepted = sorted((c for c in comparisons if c.verdict == "accepted"), key=_severity)
    shown = {id(c) for c in (*regressions, *improvements, *exact, *accepted)}
    counts_line = verdict_counts(comparisons)
    return {
        "run": run,
        "headline": headline(run),
        "counts_line": f"Comparisons: {counts_line}." if counts_line else "No comparisons.",
        "all_exact": exact,
        "traces": trace_files(run),
        "all_regressions": regressions,
        "all_improvements": improvements,
        "accepted": accepted,
        "all_failures": [r for r in run.results if r.status != "ok"],
        "ok_results": [r for r in run.results if r.status == "ok"],
        "unchanged": [c for c in comparisons if id(c) not in shown and c.verdict != "error"],
        # a trend needs two baselines at least, besides this run
        "charted": [c for c in regressions if len(c.trend) >= 2],
        "speedups": speedups(run.results),
        "cache_line": compile_cache_line(run),
        "memory_explained": [c for c in comparisons if c.sites],
        # after the variant's name, where a result is not a forward call
        "kinds": {r.key: KINDS[r.workload] for r in run.results if r.workload in KINDS},
        "sweeps": sweeps,
        "shape_sweeps": shape_sweeps(run),
        "sweep_charts": [sweep_chart(s) for s in sweeps],
        "thresholds": th,
        "verdicts": fmt.row_verdicts(run.results, comparisons),
        "base_env": run.baseline.environment,
        "dependencies": package_changes(run.baseline.environment or {}, run.environment),
        "runtime": runtime_changes(run.baseline.environment or {}, run.environment),
        "runs_in": runs_in_line(run.baseline.runs_in),
        "env_differences": environment_differences(run.baseline.environment or {}, run.environment)
        if run.baseline.environment
        else [],
        "loosened": loosened_of(run.settings),
        "ops_called": [c for c in run.op_comparisons if c.called],
        "ops_minor": [c for c in run.op_comparisons if not c.called],
        "ops_located": _located(run),
        "marker": MARKER,
    }


def _located(run: Run) -> list[tuple[Comparison, tuple[OpChange, ...]]]:
    """Each item whose median latency was not called a regression (or an improvement)
    while places in its call were, the way the model moved: where its change is."""
    out = []
    for c in run.comparisons:
        if c.metric != "latency_p50_ms" or c.verdict in ("regression", "improvement"):
            continue
        if c.change_pct is None:
            continue
        places = located(c, run.op_comparisons)
        if places:
            out.append((c, places))
    return out


__all__ = ["headline", "render_markdown"]
