"""The end-of-session table: one row per test and variant, readable in 100 columns."""

from __future__ import annotations

from collections.abc import Sequence

from perfguard.records import Run
from perfguard.report.format import ms, row_verdicts, sci, seconds, size
from perfguard.report.markdown import verdict_counts

COLUMNS = (
    ("p50", 9),
    ("p95", 9),
    ("p99", 9),
    ("memory", 10),
    ("compile", 8),
    ("drift", 8),
    ("verdict", 12),
)
WIDTH = 100


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def summary_lines(run: Run, width: int = WIDTH) -> list[str]:
    """A line per test naming it, then a row per variant under it."""
    fixed = sum(w + 1 for _, w in COLUMNS)
    name_w = max(width - fixed, 20)
    head = f"{'test / variant':<{name_w}}" + "".join(f" {n:>{w}}" for n, w in COLUMNS)
    lines = [head, "-" * len(head)]
    current_test = None
    verdicts = row_verdicts(run.results, run.comparisons)
    for r in run.results:
        if r.test != current_test:
            current_test = r.test
            lines.append(_short(r.test, width))
        step = {"train": " (training step)", "generate": " (generation)"}.get(r.workload, "")
        label = _short("  " + r.variant + step, name_w)
        m = r.metrics
        tail = "*" if "p99" in r.details.tails_too_few else ""
        if r.status == "ok":
            values: Sequence[str] = (
                ms(m.latency_p50_ms),
                ms(m.latency_p95_ms),
                ms(m.latency_p99_ms) + tail,
                size(m.peak_memory_bytes),
                seconds(m.compile_time_s),
                sci(m.drift_max_rel),
                verdicts[r.key],
            )
            lines.append(
                f"{label:<{name_w}}"
                + "".join(f" {v:>{w}}" for v, (_, w) in zip(values, COLUMNS, strict=True))
            )
        else:
            reason = _short(" ".join((r.error or "").split()), width - name_w - 10)
            lines.append(f"{label:<{name_w}} {r.status:>8}: {reason}")
    if run.comparisons:
        lines.append("verdicts: " + verdict_counts(run.comparisons))
    for op in [c for c in run.op_comparisons if c.called][:5]:
        said = "" if op.gating else ", reported only"
        lines.append(
            f"{op.verdict} in {op.test} [{op.variant}]: {op.label().replace('`', '')} "
            f"{op.change_pct:+.1f}% ({op.share_pct:.1f}% of the call{said})"
        )
    sel = run.selection
    if sel is not None and sel.partial and sel.base:
        lines.append(
            f"partial run: {len(sel.unaffected)} perf item(s) not measured, unaffected by this "
            f"change ({sel.changed_count} file(s) changed against {sel.base[:10]}); "
            "--perfguard-full measures them"
        )
    elif sel is not None:
        lines.append(f"every perf item measured: {sel.reason}")
    if any(r.details.tails_too_few for r in run.results):
        lines.append("* p99 from fewer than 1000 samples: a rough tail, not a measured one")
    return lines
