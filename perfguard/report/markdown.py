"""The Markdown report, rendered from the jinja2 templates shipped in this package."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import jinja2

from perfguard.environment_diff import environment_differences
from perfguard.records import Comparison, Run
from perfguard.report import format as fmt
from perfguard.stats.verdicts import Thresholds, summarize_verdicts


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
        pct=fmt.pct,
        sci=fmt.sci,
        value=fmt.metric_value,
    )
    return env


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
    counts = summarize_verdicts([c for c in run.comparisons if c.gating])
    errors = sum(1 for r in run.results if r.status == "error")
    if counts.get("regression"):
        pairs = {
            (c.test, c.variant) for c in run.comparisons if c.gating and c.verdict == "regression"
        }
        return (
            f"{counts['regression']} regression(s) in {len(pairs)} of "
            f"{len(run.results)} test variant(s)"
        )
    if errors:
        return f"no regression, but {errors} variant(s) failed to measure"
    if run.baseline.commit is None:
        return "measured; no baseline to compare with"
    return "no regression"


def render_markdown(run: Run, thresholds: Thresholds | None = None) -> str:
    th = thresholds or Thresholds(
        **{
            k: v
            for k, v in run.settings.get("thresholds", {}).items()
            if k in Thresholds.__dataclass_fields__
        }
    )
    comparisons = run.comparisons
    regressions = sorted(
        (c for c in comparisons if c.verdict == "regression" and c.gating), key=_severity
    )
    improvements = sorted(
        (c for c in comparisons if c.verdict == "improvement" and c.gating), key=_severity
    )
    shown = {id(c) for c in (*regressions, *improvements)}
    counts_line = verdict_counts(comparisons)
    context: dict[str, Any] = {
        "run": run,
        "headline": headline(run),
        "counts_line": f"Comparisons: {counts_line}." if counts_line else "No comparisons.",
        "regressions": regressions,
        "improvements": improvements,
        "failures": [r for r in run.results if r.status != "ok"],
        "ok_results": [r for r in run.results if r.status == "ok"],
        "unchanged": [c for c in comparisons if id(c) not in shown and c.verdict != "error"],
        "thresholds": th,
        "verdict_of": lambda r: fmt.row_verdict(r, comparisons),
        "base_env": run.baseline.environment,
        "env_differences": environment_differences(run.baseline.environment or {}, run.environment)
        if run.baseline.environment
        else [],
    }
    return _environment().get_template("report.md.j2").render(**context)


__all__ = ["headline", "render_markdown"]
