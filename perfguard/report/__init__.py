"""Rendering a run for people: Markdown (jinja2 templates) and the terminal table."""

from perfguard.report.markdown import render_markdown
from perfguard.report.terminal import summary_lines

__all__ = ["render_markdown", "summary_lines"]
