"""Where reports go: the comment-sized file, the full file beside it, the job summary."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from perfguard.comment import COMMENT_LIMIT
from perfguard.records import Run, trace_file_name
from perfguard.report.markdown import Rendering, workflow_run_link
from perfguard.stats.thresholds import TIMED_METRICS
from perfguard.stats.verdicts import Thresholds

STEP_SUMMARY_LIMIT = 1_000_000  # GitHub takes up to 1 MiB per step's summary


@dataclass(frozen=True)
class Written:
    report: Path
    full: Path | None  # the untrimmed report, when the comment-sized one had to trim
    step_summary: Path | None


def full_path(report: Path) -> Path:
    return report.with_name(f"{report.stem}-full{report.suffix or '.md'}")


def write_reports(
    run: Run,
    report: Path,
    thresholds: Thresholds | None = None,
    *,
    limit: int | None = COMMENT_LIMIT,
    step_summary: bool = True,
) -> Written:
    """Write `report` (within `limit`); when it had to trim, the full report beside it.

    With `step_summary` and `$GITHUB_STEP_SUMMARY` set, the report is appended there too.
    """
    report.parent.mkdir(parents=True, exist_ok=True)
    rendering = Rendering(run, thresholds)  # the full report and the trimmed one share it
    full_text = rendering.text(limit=None)
    full: Path | None = None
    if limit is not None and len(full_text) > limit:
        full = full_path(report)
        full.write_text(full_text, encoding="utf-8")
        text = rendering.text(limit, full_report=_artifact_hint(full.name))
    else:
        text = full_text
        stale = full_path(report)
        if stale.exists():
            stale.unlink()
    report.write_text(text, encoding="utf-8")
    summary_path = None
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary and target:
        summary_path = Path(target)
        body = full_text if len(full_text) <= STEP_SUMMARY_LIMIT else text
        with summary_path.open("a", encoding="utf-8") as out:
            out.write(body + "\n")
    return Written(report, full, summary_path)


def _artifact_hint(name: str) -> str:
    link = workflow_run_link()
    return f"`{name}` (the artifacts of {link})" if link else f"`{name}` beside this report"


def keep_regressed_traces(run: Run, folder: Path) -> None:
    """Remove the traces of items that are not latency regressions (a suite's worth of traces
    is large; the regressions' are what a reviewer opens)."""
    keep = {
        trace_file_name(c.test, c.variant, side)
        for c in run.comparisons
        if c.verdict == "regression" and c.gating and c.metric in TIMED_METRICS
        for side in ("head", "base")
    }
    if folder.is_dir():
        for path in folder.glob("*.trace.json"):
            if path.name not in keep:
                path.unlink(missing_ok=True)
