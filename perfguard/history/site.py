"""`perfguard site`: a static trend site of main's baselines, plotted with plotly.

An index page (the change points, newest first, and a link per test) and one page per test:
for each variant, latency p50/p95/p99 (p50 with the spread of its repeats as a band),
speed-up over eager, compile time, peak memory and drift, over main's commits, every machine
in its own colour, each change point marked where it happened. A point links to its commit.
plotly.js is written beside the pages, so the site opens offline (and on GitHub Pages).
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfguard.history.analysis import ChangePoint, History, commit_range
from perfguard.history.series import Series, speedups
from perfguard.report.format import metric_value, pct, sci

PLOTLY_JS = "plotly.min.js"
ROWS = (  # (title, metrics plotted in that row, scale)
    ("latency p50 (ms), band: the spread of its repeats", ("latency_p50_ms",), 1.0),
    ("latency tails p95, p99 (ms)", ("latency_p95_ms", "latency_p99_ms"), 1.0),
    ("speed-up over eager", ("speedup_over_eager",), 1.0),
    ("compile time (s)", ("compile_time_s",), 1.0),
    ("peak memory (MiB)", ("peak_memory_bytes",), 1.0 / 2**20),
    ("drift, max abs", ("drift_max_abs",), 1.0),
)
DASH = {"latency_p50_ms": "solid", "latency_p95_ms": "dash", "latency_p99_ms": "dot"}
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
# on a click, open the point's commit (its customdata) in a new tab
CLICK_SCRIPT = (
    "var d=document.getElementById('{plot_id}');"
    "d.on('plotly_click',function(e){var p=e.points[0];"
    "if(p&&p.customdata&&window.PERFGUARD_COMMIT_URL){"
    "window.open(window.PERFGUARD_COMMIT_URL.replace('{sha}',p.customdata),'_blank');}});"
)


def page_name(test: str) -> str:
    """A file name of its own for each test (node ids hold `/`, `::` and brackets)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", test.split("::")[-1]).strip("-")[:60]
    return f"{readable or 'test'}-{hashlib.sha1(test.encode()).hexdigest()[:8]}.html"


def _traces(s: Series, x: list[int], scale: float, colour: str) -> list[Any]:
    """A series' line, and the band of its repeats' spread where it has one."""
    import plotly.graph_objects as go

    traces = []
    banded = [(xi, p) for xi, p in zip(x, s.points, strict=True) if p.low is not None]
    if banded:
        band_x = [xi for xi, _ in banded]
        traces.append(
            go.Scatter(
                x=band_x + band_x[::-1],
                y=[(p.high or p.value) * scale for _, p in banded]
                + [(p.low or p.value) * scale for _, p in banded][::-1],
                fill="toself",
                fillcolor=colour,
                opacity=0.15,
                line={"width": 0},
                hoverinfo="skip",
                name=f"{s.machine} {s.metric} spread of repeats",
                legendgroup=s.machine,
                showlegend=False,
            )
        )
    traces.append(
        go.Scatter(
            x=x,
            y=[p.value * scale for p in s.points],
            customdata=[p.commit for p in s.points],
            mode="lines+markers",
            line={"color": colour, "dash": DASH.get(s.metric, "solid")},
            marker={"size": 4},
            name=f"{s.machine}: {s.metric}",
            legendgroup=s.machine,
            hovertemplate="%{customdata:.10}<br>%{y:.4g}<extra>%{fullData.name}</extra>",
        )
    )
    return traces


def _figure(
    variant_series: Sequence[Series],
    commits: Sequence[str],
    change_points: Sequence[ChangePoint],
) -> Any:
    """One figure per variant: a row per kind of figure, shared commit axis."""
    from plotly.subplots import make_subplots

    rows = [r for r in ROWS if any(s.metric in r[1] for s in variant_series)]
    fig = make_subplots(
        rows=len(rows),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[r[0] for r in rows],
    )
    position = {sha: i for i, sha in enumerate(commits)}
    machines = sorted({s.machine for s in variant_series})
    for row, (_title, metrics, scale) in enumerate(rows, start=1):
        for s in (s for s in variant_series if s.metric in metrics):
            colour = COLOURS[machines.index(s.machine) % len(COLOURS)]
            for trace in _traces(s, [position[p.commit] for p in s.points], scale, colour):
                fig.add_trace(trace, row=row, col=1)
        for c in (c for c in change_points if c.metric in metrics):
            fig.add_vline(
                x=position[c.commit] - 0.5,
                line={"color": "#d62728" if c.kind == "regression" else "#2ca02c", "dash": "dash"},
                annotation_text=pct(c.change_pct).replace("\u00a0", " "),
                row=row,
                col=1,
            )
    fig.update_layout(height=230 * len(rows) + 80, margin={"t": 40, "b": 40}, hovermode="closest")
    fig.update_xaxes(title_text="commit of main (oldest first)", row=len(rows), col=1)
    return fig


def _page(title: str, body: str, commit_url: str | None) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("perfguard.history", "templates"),
        autoescape=True,
        keep_trailing_newline=True,
    )
    template = env.get_template("page.html.j2")
    return template.render(title=title, body=body, commit_url=commit_url or "", plotly=PLOTLY_JS)


def _change_table(change_points: Sequence[ChangePoint], commit_url: str | None) -> str:
    if not change_points:
        return "<p>No change points.</p>"
    rows = []
    for c in change_points:
        rows.append(
            "<tr>"
            f"<td class='{c.kind}'>{c.kind}</td><td>{html.escape(pct(c.change_pct))}</td>"
            f"<td>{_range_html(c, commit_url)}</td>"
            f"<td><a href='{page_name(c.test)}'>{html.escape(c.test)}</a></td>"
            f"<td>{html.escape(c.variant)}</td><td>{c.metric}</td>"
            f"<td>{html.escape(metric_value(c.metric, c.before))}</td>"
            f"<td>{html.escape(metric_value(c.metric, c.after))}</td>"
            f"<td>{sci(c.p_value)}</td><td>{html.escape(c.machine)}</td></tr>"
        )
    head = (
        "<tr><th></th><th>change</th><th>commits</th><th>test</th><th>variant</th>"
        "<th>metric</th><th>before</th><th>after</th><th>p</th><th>machine</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>"


def _range_html(c: ChangePoint, commit_url: str | None) -> str:
    if not commit_url:
        return html.escape(commit_range(c, None).replace("`", ""))
    links = [
        f"<a href='{html.escape(commit_url.format(sha=sha))}'><code>{sha[:10]}</code></a>"
        for sha in (c.previous, c.commit)
    ]
    return "..".join(links)


def _test_page(
    test: str, series: Sequence[Series], history: History, commit_url: str | None
) -> str:
    import plotly.io as pio

    commits = list(dict.fromkeys(history.commits))
    parts = [f"<p><a href='index.html'>all tests</a></p><h1>{html.escape(test)}</h1>"]
    mine = [c for c in history.change_points if c.test == test]
    parts.append(_change_table(mine, commit_url))
    for variant in sorted({s.variant for s in series}):
        variant_series = [s for s in series if s.variant == variant]
        figure = _figure(variant_series, commits, [c for c in mine if c.variant == variant])
        div = pio.to_html(
            figure,
            include_plotlyjs=False,
            full_html=False,
            div_id=f"plot-{hashlib.sha1(variant.encode()).hexdigest()[:10]}",
            post_script=CLICK_SCRIPT,
            config={"displaylogo": False, "responsive": True},
        )
        parts.append(f"<h2>{html.escape(variant)}</h2><div class='plot'>{div}</div>")
    return _page(test, "\n".join(parts), commit_url)


def write_site(history: History, out: Path, *, commit_url: str | None = None) -> list[Path]:
    """Write the site into `out` (created); return the pages written."""
    import plotly.offline

    out.mkdir(parents=True, exist_ok=True)
    (out / PLOTLY_JS).write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")
    every = [*history.series, *speedups(history.series)]
    tests = sorted({s.test for s in every})
    written = []
    for test in tests:
        path = out / page_name(test)
        page = _test_page(test, [s for s in every if s.test == test], history, commit_url)
        path.write_text(page, encoding="utf-8")
        written.append(path)
    links = "".join(f"<li><a href='{page_name(t)}'>{html.escape(t)}</a></li>" for t in tests)
    body = (
        f"<h1>perfguard: main's history</h1><p>{html.escape(_summary_line(history))}</p>"
        f"<h2>Change points, newest first</h2>{_change_table(history.change_points, commit_url)}"
        f"<h2>Tests</h2><ul>{links}</ul>"
    )
    index = out / "index.html"
    index.write_text(_page("perfguard history", body, commit_url), encoding="utf-8")
    return [index, *written]


def _summary_line(history: History) -> str:
    commits = list(dict.fromkeys(history.commits))
    machines = sorted({s.machine for s in history.series})
    return f"{len(commits)} commits of main, {history.ordered.how}; machines: {', '.join(machines)}"
