"""The trend site's figures: a row per kind of figure on one shared commit axis, written as
plotly.js's traces and layout (plotly's Python figure objects validate every value, which took
most of a large site's time). A trace is a spec the page fills from the chunks of its series."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfguard.history.analysis import ChangePoint
from perfguard.history.site_data import series_id
from perfguard.report.format import pct

ROWS = (  # (title, metrics plotted in that row, scale)
    ("latency p50 (ms), band: the spread of its repeats", ("latency_p50_ms",), 1.0),
    ("latency tails p95, p99 (ms)", ("latency_p95_ms", "latency_p99_ms"), 1.0),
    (
        "generation: time to first token (solid), per token after it (dash), p50 (ms)",
        ("ttft_p50_ms", "tpot_p50_ms"),
        1.0,
    ),
    ("speed-up over eager", ("speedup_over_eager",), 1.0),
    ("compile time (s)", ("compile_time_s",), 1.0),
    ("peak memory (MiB)", ("peak_memory_bytes",), 1.0 / 2**20),
    ("drift, max abs", ("drift_max_abs",), 1.0),
    ("runner time of the run (min)", ("run_seconds",), 1.0 / 60),
)
SCALE = {metric: scale for _, metrics, scale in ROWS for metric in metrics}
SPACING = 0.06  # between rows, a share of the figure's height
Figure = dict[str, Any]  # a plotly.js trace or layout, as JSON
DASH = {
    "latency_p50_ms": "solid",
    "latency_p95_ms": "dash",
    "latency_p99_ms": "dot",
    "ttft_p50_ms": "solid",
    "tpot_p50_ms": "dash",
}
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def trace_specs(
    sid: str, machine: str, metric: str, banded: bool, colour: str, row: int
) -> list[Figure]:
    """A series' line, and the band of its repeats' spread where it has one, on `row`, as
    the page's script builds them from the chunks: each spec names its series (`id`) and
    the chunks' field it plots; the script adds the values from the series' first commit to
    its last, a gap where a commit has none, and no coordinates (`x0`, `dx`): a site of a
    long main is millions of points, and their commits, written out, were most of its size."""
    base = {
        "type": "scatter",
        "xaxis": axis("x", row),
        "yaxis": axis("y", row),
        "legendgroup": machine,
    }
    specs: list[Figure] = []
    if banded:  # the band: the highs (no line), then the lows filled up to them
        edge = {"mode": "lines", "line": {"width": 0}, "hoverinfo": "skip", "showlegend": False}
        specs.append(
            {"id": sid, "field": "hi", "trace": {**base, **edge, "name": f"{machine} high"}}
        )
        low = {"fill": "tonexty", "fillcolor": _faint(colour)}
        name = f"{machine} {metric} spread of repeats"
        specs.append({"id": sid, "field": "lo", "trace": {**base, **edge, **low, "name": name}})
    line = {
        **base,
        "mode": "lines+markers",
        "line": {"color": colour, "dash": DASH.get(metric, "solid")},
        "marker": {"size": 4},
        "name": f"{machine}: {metric}",
        "hovertemplate": "commit %{x}<br>%{y:.4g}<extra>%{fullData.name}</extra>",
    }
    specs.append({"id": sid, "field": "y", "trace": line})
    return specs


def _faint(colour: str, alpha: float = 0.15) -> str:
    """`#rrggbb` as a see-through rgba() fill."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def axis(letter: str, row: int) -> str:
    """plotly.js's name of row `row`'s axis as a trace names it: x, x2, x3..."""
    return letter if row == 1 else f"{letter}{row}"


def _layout(titles: Sequence[str]) -> Figure:
    """Rows stacked top to bottom on one shared commit axis, as plotly's `make_subplots`
    lays them out, written as plotly.js's layout (plotly's Python figure objects validate
    every value, which took most of a large site's time)."""
    n = len(titles)
    height = (1.0 - SPACING * (n - 1)) / n
    layout: Figure = {
        "height": 230 * n + 80,
        "margin": {"t": 40, "b": 40},
        "hovermode": "closest",
        "legend": {"traceorder": "normal"},  # a band's fill would reverse it
        "annotations": [],
        "shapes": [],
    }
    for row, title in enumerate(titles, start=1):
        top = 1.0 - (row - 1) * (height + SPACING)
        name = "" if row == 1 else str(row)
        layout[f"xaxis{name}"] = {
            "anchor": f"y{name}",
            "domain": [0.0, 1.0],
            **({"matches": axis("x", n), "showticklabels": False} if row < n else {}),
            **({"title": {"text": "commit of main (oldest first)"}} if row == n else {}),
        }
        layout[f"yaxis{name}"] = {"anchor": f"x{name}", "domain": [max(top - height, 0.0), top]}
        layout["annotations"].append(
            {
                "text": title,
                "x": 0.5,
                "xanchor": "center",
                "xref": "paper",
                "y": top,
                "yanchor": "bottom",
                "yref": "paper",
                "showarrow": False,
                "font": {"size": 16},
            }
        )
    return layout


def _mark(layout: Figure, c: ChangePoint, x: float, row: int) -> None:
    """A dashed line where change point `c` happened, with its change written at its top."""
    colour = "#d62728" if c.kind == "regression" else "#2ca02c"
    xref, yref = axis("x", row), f"{axis('y', row)} domain"
    layout["shapes"].append(
        {
            "type": "line",
            "xref": xref,
            "yref": yref,
            "x0": x,
            "x1": x,
            "y0": 0,
            "y1": 1,
            "line": {"color": colour, "dash": "dash"},
        }
    )
    layout["annotations"].append(
        {
            "text": pct(c.change_pct).replace("\u00a0", " "),
            "xref": xref,
            "yref": yref,
            "x": x,
            "y": 1,
            "xanchor": "left",
            "yanchor": "top",
            "showarrow": False,
        }
    )


def figure(
    variant: str,
    kinds: Mapping[tuple[str, str], bool],
    position: Mapping[str, int],
    change_points: Sequence[ChangePoint],
) -> tuple[list[Figure], Figure]:
    """One figure per variant (its traces' specs, layout): a row per kind of figure, shared
    commit axis (`position`: each commit's place on it). `kinds`: the variant's series,
    (machine, metric), each with whether it has a band."""
    rows = [r for r in ROWS if any(metric in r[1] for _, metric in kinds)]
    layout = _layout([r[0] for r in rows])
    specs: list[Figure] = []
    machines = sorted({machine for machine, _ in kinds})
    for row, (_title, metrics, _scale) in enumerate(rows, start=1):
        for metric in metrics:
            for machine in machines:
                if (machine, metric) in kinds:
                    colour = COLOURS[machines.index(machine) % len(COLOURS)]
                    sid = series_id(machine, variant, metric)
                    banded = kinds[(machine, metric)]
                    specs += trace_specs(sid, machine, metric, banded, colour, row)
        for c in (c for c in change_points if c.metric in metrics):
            _mark(layout, c, position[c.commit] - 0.5, row)
    return specs, layout
