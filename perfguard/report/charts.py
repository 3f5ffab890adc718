"""Trend charts as mermaid `xychart-beta` blocks, which GitHub renders in comments."""

from __future__ import annotations

import re

from perfguard.records import Comparison
from perfguard.report.format import metric_unit

_UNSAFE = re.compile(r"[^A-Za-z0-9 _.:/()\[\]=,+-]")
TITLE_CHARS = 80


def label(text: str) -> str:
    """Text from a test made inert inside a quoted mermaid string (and its code fence)."""
    clean = _UNSAFE.sub("", " ".join(text.split()))
    return clean if len(clean) <= TITLE_CHARS else clean[: TITLE_CHARS - 3] + "..."


def number(value: float) -> str:
    return f"{value:.6g}"


def trend_chart(c: Comparison, commit: str | None) -> str:
    """The metric over the recent baselines and this run, as a fenced mermaid block."""
    unit, scale = metric_unit(c.metric)
    points = [(sha[:7], value) for sha, value in c.trend]
    if c.current is not None:
        points.append(((commit or "")[:7] + " (this run)" if commit else "this run", c.current))
    values = [v * scale for _, v in points]
    top = max(values) * 1.1 if values and max(values) > 0 else 1.0
    labels = ", ".join(f'"{label(name)}"' for name, _ in points)
    title = label(f"{c.test} [{c.variant}] {c.metric}")
    return "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            f'    title "{title}"',
            f"    x-axis [{labels}]",
            f'    y-axis "{unit}" 0 --> {number(top)}',
            f"    line [{', '.join(number(v) for v in values)}]",
            "```",
        ]
    )
