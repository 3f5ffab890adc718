"""Units and escaping for reports. Pure functions of values."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from functools import lru_cache

from perfguard.records import Comparison, VariantResult

NBSP = "\u00a0"  # keeps a number and its unit on one line in a narrow table column

SEVERITY = (
    "regression",
    "error",
    "accepted",
    "inconclusive",
    "improvement",
    "missing",
    "new",
    "unchanged",
)
"""Verdicts from the worst news to the least; a row shows its worst."""


def ms(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:.0f}{NBSP}ms"
    if value >= 1:
        return f"{value:.2f}{NBSP}ms"
    return f"{value * 1000:.1f}{NBSP}µs"


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}{NBSP}s"


def duration(value: float | None) -> str:
    """A run's time: "45 s", "3 min 12 s", "1 h 04 min"."""
    if value is None:
        return "–"
    whole = round(value)
    if whole < 60:
        return f"{value:.0f}{NBSP}s" if value >= 1 else f"{value:.1f}{NBSP}s"
    if whole < 3600:
        return f"{whole // 60}{NBSP}min {whole % 60:02d}{NBSP}s"
    return f"{whole // 3600}{NBSP}h {whole % 3600 // 60:02d}{NBSP}min"


def size(value: float | None) -> str:
    if value is None:
        return "–"
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    v = float(value)
    for unit in units:
        if abs(v) < 1024 or unit == units[-1]:
            return f"{v:.0f}{NBSP}{unit}" if unit == "B" else f"{v:.1f}{NBSP}{unit}"
        v /= 1024
    return f"{v:.1f}{NBSP}TiB"


def pct(value: float | None, signed: bool = True) -> str:
    if value is None or math.isnan(value):
        return "–"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def sci(value: float | None) -> str:
    if value is None:
        return "–"
    if value == 0:
        return "0"
    return f"{value:.2g}" if abs(value) >= 1e-3 else f"{value:.1e}"


def metric_value(metric: str, value: float | None) -> str:
    if metric.endswith("_ms"):
        return ms(value)
    if metric.endswith("_bytes"):
        return size(value)
    if metric.endswith("_s"):
        return seconds(value)
    return sci(value)


def metric_unit(metric: str) -> tuple[str, float]:
    """The unit a chart of `metric` is drawn in, and the factor from stored values to it."""
    if metric.endswith("_ms"):
        return "ms", 1.0
    if metric.endswith("_bytes"):
        return "MiB", 1.0 / 2**20
    if metric.endswith("_s"):
        return "s", 1.0
    return "", 1.0


def interval(metric: str, ci: tuple[float, float]) -> str:
    """'2.68–2.70 ms': both bounds in the unit of the upper one, the unit written once."""
    high = metric_value(metric, ci[1])
    _, sep, unit = high.partition(NBSP)
    if not sep:
        return f"{metric_value(metric, ci[0])}–{high}"
    low = metric_value(metric, ci[0])
    low_number, _, low_unit = low.partition(NBSP)
    return f"{low_number}–{high}" if low_unit == unit else f"{low}–{high}"


def speedup(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def effect(value: float | None) -> str:
    """Cohen's d, read at a glance: 0.84, 12, 140 (not 1.4e+02)."""
    if value is None or math.isnan(value):
        return "–"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2g}"


def rate(value: float | None) -> str:
    """Items per second, three significant digits: 950, 12.3k, 1.20M."""
    if value is None:
        return "–"
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def percent(value: float | None) -> str:
    """A share (0 to 1) as a percentage: 100%, 93.8%."""
    return "–" if value is None else f"{value * 100:.3g}%"


def count(value: float | None) -> str:
    return "–" if value is None else f"{int(value):,}"


_CELL = re.compile(r"[\\`*_{}\[\]<>|!~&]")
# GitHub decodes entities before it links mentions (@user, @org/team), references (#123) and
# bare URLs, so those are broken with a zero-width space instead: shown, never linked
ZWSP = "\u200b"
_LINKED = re.compile(r"[@#]|(?<=:)//|(?i:(?<=www)\.)")
CELL_CHARS = 300  # longer text (a traceback pasted into a message) is cut, with an ellipsis
# control characters, and the marks that reorder text on screen (bidi overrides and isolates,
# as in "Trojan Source"): shown by their code point, never passed on
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def cell(text: object) -> str:
    """Text from a test (node ids, exception text) made safe inside a Markdown table cell."""
    return _cell(str(text))


@lru_cache(maxsize=1 << 16)
def _cell(text: str) -> str:
    """`cell` of a string, kept: a suite's report writes each test id a dozen times."""
    raw = " ".join(text.split())  # newlines and runs of spaces become one space
    raw = _HIDDEN.sub(lambda m: f"U+{ord(m.group(0)):04X}", raw)
    if len(raw) > CELL_CHARS:
        raw = raw[: CELL_CHARS - 1] + "…"
    unlinked = _LINKED.sub(lambda m: m.group(0)[0] + ZWSP + m.group(0)[1:], raw)
    return _CELL.sub(lambda m: f"&#{ord(m.group(0))};", unlinked)


def worst(verdicts: Iterable[str]) -> str:
    found = set(verdicts)
    for verdict in SEVERITY:
        if verdict in found:
            return verdict
    return "–"


def row_verdicts(
    results: Iterable[VariantResult], comparisons: Iterable[Comparison]
) -> dict[tuple[str, str], str]:
    """(test, variant) -> its worst gating verdict, in one pass over the comparisons."""
    by_key: dict[tuple[str, str], list[str]] = {}
    for c in comparisons:
        if c.gating:
            by_key.setdefault((c.test, c.variant), []).append(c.verdict)
    out: dict[tuple[str, str], str] = {}
    for r in results:
        if r.status in ("error", "skipped"):
            out[r.key] = r.status
        else:
            found = by_key.get(r.key)
            out[r.key] = worst(found) if found else "–"
    return out


def rule(value: object) -> str:
    """A verdict rule's value as its user writes it: 900, not 900.0; True stays True; none
    set is the setting's own default."""
    if value is None:
        return "unset (the default)"
    return f"{value:g}" if isinstance(value, float) else str(value)
