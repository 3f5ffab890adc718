"""`perfguard site`: a static trend site of main's baselines, plotted with plotly.

An index page (the change points, newest first, and a link per test) and one page per test:
for each variant, latency p50/p95/p99 (p50 with the spread of its repeats as a band),
speed-up over eager, compile time, peak memory and drift, over main's commits, every machine
in its own colour, each change point marked where it happened. A point links to its commit.
plotly.js is written beside the pages, so the site opens offline (and on GitHub Pages).
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.history.analysis import ChangePoint, History, commit_range
from perfguard.history.series import Series, speedups
from perfguard.report.format import metric_value, pct, sci
from perfguard.store.summary import RUN_TEST

if TYPE_CHECKING:
    import numpy as np

PLOTLY_JS = "plotly.min.js"
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
SPACING = 0.06  # between rows, a share of the figure's height
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
Figure = dict[str, Any]  # a plotly.js trace or layout, as JSON
DASH = {
    "latency_p50_ms": "solid",
    "latency_p95_ms": "dash",
    "latency_p99_ms": "dot",
    "ttft_p50_ms": "solid",
    "tpot_p50_ms": "dash",
}
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
# on a click, open the point's commit (the page's list of commits, by the point's x) in a new
# tab; on a hover, write the commit under the plot
CLICK_SCRIPT = (
    "var d=document.getElementById('{plot_id}');"
    "var sha=function(e){var p=e.points[0];return p&&(window.PERFGUARD_COMMITS||[])[p.x];};"
    "d.on('plotly_click',function(e){var s=sha(e);"
    "if(s&&window.PERFGUARD_COMMIT_URL){"
    "window.open(window.PERFGUARD_COMMIT_URL.replace('{sha}',s),'_blank');}});"
    "d.on('plotly_hover',function(e){var s=sha(e);"
    "if(s){document.getElementById('{plot_id}-sha').textContent='commit '+s;}});"
)


def page_name(test: str) -> str:
    """A file name of its own for each test (node ids hold `/`, `::` and brackets)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", test.split("::")[-1]).strip("-")[:60]
    return f"{readable or 'test'}-{hashlib.sha1(test.encode()).hexdigest()[:8]}.html"


def _traces(s: Series, at: list[int], scale: float, colour: str, row: int) -> list[Figure]:
    """A series' line, and the band of its repeats' spread where it has one, on `row`. `at`:
    each point's place on the commit axis. A trace holds its values from its first commit to
    its last, a gap where a commit has none, and no coordinates (`x0`, `dx`): a site of a long
    main is millions of points, and their commits, written out, were most of its size."""
    first = at[0]
    base = {
        "type": "scatter",
        "xaxis": _axis("x", row),
        "yaxis": _axis("y", row),
        "x0": first,
        "dx": 1,
        "legendgroup": s.machine,
    }

    def placed(values: Sequence[float | None] | np.ndarray) -> list[float]:
        import numpy as np

        out = np.full(at[-1] - first + 1, np.nan)
        out[np.asarray(at) - first] = np.asarray(values, dtype=float)  # None: NaN, a gap
        return _plotted(out, scale)

    traces: list[Figure] = []
    if len(s.low):  # the band: the highs (no line), then the lows filled up to them
        edge = {"mode": "lines", "line": {"width": 0}, "hoverinfo": "skip", "showlegend": False}
        traces.append({**base, **edge, "y": placed(_highs(s)), "name": f"{s.machine} high"})
        traces.append(
            {
                **base,
                **edge,
                "y": placed(s.low),
                "fill": "tonexty",
                "fillcolor": _faint(colour),
                "name": f"{s.machine} {s.metric} spread of repeats",
            }
        )
    traces.append(
        {
            **base,
            "y": placed(s.values),
            "mode": "lines+markers",
            "line": {"color": colour, "dash": DASH.get(s.metric, "solid")},
            "marker": {"size": 4},
            "name": f"{s.machine}: {s.metric}",
            "hovertemplate": "commit %{x}<br>%{y:.4g}<extra>%{fullData.name}</extra>",
        }
    )
    return traces


def _faint(colour: str, alpha: float = 0.15) -> str:
    """`#rrggbb` as a see-through rgba() fill."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _highs(s: Series) -> np.ndarray:
    """The top of a series' band: its highs, or its value where it has a low and no high."""
    import numpy as np

    highs = s.high if len(s.high) else np.full(len(s.values), np.nan)
    return np.where(np.isnan(highs) & ~np.isnan(s.low), s.values, highs)


def _plotted(values: Sequence[float] | np.ndarray, scale: float) -> list[float]:
    """`values` times `scale`, to six significant digits (a hover shows four): a site of a
    long main is millions of points, and their last digits were half its size."""
    import numpy as np

    v = np.asarray(values, dtype=float) * scale  # NaN stays NaN: a gap
    out = v.copy()
    ok = np.isfinite(v) & (v != 0)
    k = 5 - np.floor(np.log10(np.abs(v[ok])))
    up, down = k >= 0, k < 0  # scaled by an exact power of ten either way
    rounded = np.empty_like(k)
    rounded[up] = np.round(v[ok][up] * 10.0 ** k[up]) / 10.0 ** k[up]
    rounded[down] = np.round(v[ok][down] / 10.0 ** -k[down]) * 10.0 ** -k[down]
    out[ok] = rounded
    return list(out.tolist())


def _axis(letter: str, row: int) -> str:
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
            **({"matches": _axis("x", n), "showticklabels": False} if row < n else {}),
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
    xref, yref = _axis("x", row), f"{_axis('y', row)} domain"
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


def _figure(
    variant_series: Sequence[Series],
    position: Mapping[str, int],
    change_points: Sequence[ChangePoint],
) -> tuple[list[Figure], Figure]:
    """One figure per variant (traces, layout): a row per kind of figure, shared commit axis
    (`position`: each commit's place on it)."""
    rows = [r for r in ROWS if any(s.metric in r[1] for s in variant_series)]
    layout = _layout([r[0] for r in rows])
    traces: list[Figure] = []
    machines = sorted({s.machine for s in variant_series})
    for row, (_title, metrics, scale) in enumerate(rows, start=1):
        for s in (s for s in variant_series if s.metric in metrics):
            colour = COLOURS[machines.index(s.machine) % len(COLOURS)]
            traces += _traces(s, [position[c] for c in s.commits], scale, colour, row)
        for c in (c for c in change_points if c.metric in metrics):
            _mark(layout, c, position[c.commit] - 0.5, row)
    return traces, layout


def _script_json(value: object) -> str:
    """`value` as JSON that is inert inside a <script> element (test names are text from
    the repository: `</script>` in one must not end the element)."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _plot_div(plot_id: str, traces: list[Figure], layout: Figure) -> str:
    """A div and the script that draws the figure in it with plotly.js (loaded by the page),
    a point's click opening its commit."""
    click = CLICK_SCRIPT.replace("{plot_id}", plot_id)
    return (
        f'<div id="{plot_id}" class="plotly-graph-div" style="height:{layout["height"]}px;'
        f'width:100%;"></div><p id="{plot_id}-sha" class="sha"></p>'
        f'<script>Plotly.newPlot("{plot_id}",{_script_json(traces)},'
        f"{_script_json(layout)},{_script_json(PLOT_CONFIG)}).then(function(){{{click}}});"
        "</script>"
    )


@functools.cache
def _template() -> Any:
    """The page template, compiled once (a site is a page per test)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("perfguard.history", "templates"),
        autoescape=True,
        keep_trailing_newline=True,
    )
    return env.get_template("page.html.j2")


def _page(title: str, body: str, commit_url: str | None) -> str:
    page: str = _template().render(
        title=title, body=body, commit_url=commit_url or "", plotly=PLOTLY_JS
    )
    return page


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
            f"<td>{sci(c.p_value)}</td><td>{html.escape(c.machine)}</td>"
            f"<td>{html.escape(c.environment)}</td></tr>"
        )
    head = (
        "<tr><th></th><th>change</th><th>commits</th><th>test</th><th>variant</th>"
        "<th>metric</th><th>before</th><th>after</th><th>p</th><th>machine</th>"
        "<th>environment changed</th></tr>"
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


def _commits_script(commits: Sequence[str]) -> str:
    """The page's commits, in the order of the plots' axis (a point's x is its place)."""
    return f"<script>window.PERFGUARD_COMMITS={_script_json(list(commits))};</script>"


def _test_page(
    test: str,
    series: Sequence[Series],
    change_points: Sequence[ChangePoint],
    position: Mapping[str, int],
    commit_url: str | None,
    script: str,
) -> str:
    parts = [f"<p><a href='index.html'>all tests</a></p><h1>{html.escape(test)}</h1>", script]
    mine = [c for c in change_points if c.test == test]
    parts.append(_change_table(mine, commit_url))
    for variant in sorted({s.variant for s in series}):
        variant_series = [s for s in series if s.variant == variant]
        marks = [c for c in mine if c.variant == variant]
        traces, layout = _figure(variant_series, position, marks)
        div = _plot_div(f"plot-{hashlib.sha1(variant.encode()).hexdigest()[:10]}", traces, layout)
        parts.append(f"<h2>{html.escape(variant)}</h2><div class='plot'>{div}</div>")
    return _page(test, "\n".join(parts), commit_url)


def write_site(history: History, out: Path, *, commit_url: str | None = None) -> list[Path]:
    """Write the site into `out` (created); return the pages written."""
    import plotly.offline

    out.mkdir(parents=True, exist_ok=True)
    (out / PLOTLY_JS).write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")
    by_test: dict[str, list[Series]] = {}
    for s in [*history.series, *speedups(history.series)]:
        by_test.setdefault(s.test, []).append(s)
    tests = sorted(by_test)
    commits = list(dict.fromkeys(history.commits))
    position = {sha: i for i, sha in enumerate(commits)}
    script = _commits_script(commits)
    written = []
    for test in tests:
        path = out / page_name(test)
        page = _test_page(test, by_test[test], history.change_points, position, commit_url, script)
        path.write_text(page, encoding="utf-8")
        written.append(path)
    links = "".join(
        f"<li><a href='{page_name(t)}'>{html.escape(t)}</a></li>" for t in tests if t != RUN_TEST
    )
    cost = (
        f"<p>What each commit's run cost on its runners: <a href='{page_name(RUN_TEST)}'>"
        "runner time per commit</a>.</p>"
        if RUN_TEST in by_test
        else ""
    )
    body = (
        f"<h1>perfguard: main's history</h1><p>{html.escape(_summary_line(history))}</p>{cost}"
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
