"""Rendering a run for people: Markdown (jinja2 templates) and the terminal table.

The two renderers are imported when first asked for: main's history formats its figures with
`perfguard.report.format` alone, and a push's `history`, `alert` and `site` should not import
the run's statistics to do so."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfguard.report.markdown import render_markdown
    from perfguard.report.terminal import summary_lines

__all__ = ["render_markdown", "summary_lines"]


def __getattr__(name: str) -> Any:
    if name == "render_markdown":
        from perfguard.report.markdown import render_markdown

        return render_markdown
    if name == "summary_lines":
        from perfguard.report.terminal import summary_lines

        return summary_lines
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
