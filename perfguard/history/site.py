"""`perfguard site`: a static trend site of main's baselines, plotted with plotly.

An index page (the change points, newest first, and a link per test) and one page per test:
for each variant, latency p50/p95/p99 (p50 with the spread of its repeats as a band),
speed-up over eager, compile time, peak memory and drift, over main's commits, every machine
in its own colour, each change point marked where it happened. A point links to its commit.
plotly.js is written beside the pages, so the site opens offline (and on GitHub Pages).

The figures themselves are chunk scripts the pages load (`site_data`): a push's update
(`update_site`) keeps the settled chunks as they are and writes the rest, the pages, the
index and the manifest again.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfguard.history import site_data
from perfguard.history.analysis import ChangePoint, History, commit_range
from perfguard.history.series import Series, speedups
from perfguard.history.site_data import (
    DATA,
    MANIFEST,
    SiteData,
    TestData,
    advance,
    chunk_path,
    chunks_of,
    settled,
    write_chunk,
)
from perfguard.history.site_figures import SCALE, Figure, figure
from perfguard.report.format import metric_value, pct, sci
from perfguard.store.summary import RUN_TEST

PLOTLY_JS = "plotly.min.js"
COMMITS_JS = "commits.js"  # main's commits, the axis every page shares
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
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


def _script_json(value: object) -> str:
    """`value` as JSON that is inert inside a <script> element (test names are text from
    the repository: `</script>` in one must not end the element)."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _plot_div(plot_id: str, specs: list[Figure], layout: Figure) -> str:
    """A div and the script that draws the figure in it with plotly.js (loaded by the page),
    its traces made from the chunks by the page's `perfguardTraces`, a point's click opening
    its commit."""
    click = CLICK_SCRIPT.replace("{plot_id}", plot_id)
    return (
        f'<div id="{plot_id}" class="plotly-graph-div" style="height:{layout["height"]}px;'
        f'width:100%;"></div><p id="{plot_id}-sha" class="sha"></p>'
        f'<script>Plotly.newPlot("{plot_id}",perfguardTraces({_script_json(specs)}),'
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


def _page(title: str, body: str, commit_url: str | None, *, plots: bool = False) -> str:
    page: str = _template().render(
        title=title,
        body=body,
        commit_url=commit_url or "",
        plotly=PLOTLY_JS,
        plots=plots,
        commits=COMMITS_JS,
        chunk=site_data.CHUNK,
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


def _test_page(
    test: str,
    data: TestData,
    change_points: Sequence[ChangePoint],
    position: Mapping[str, int],
    commit_url: str | None,
) -> str:
    parts = [f"<p><a href='index.html'>all tests</a></p><h1>{html.escape(test)}</h1>"]
    stem = html.escape(data.stem)  # letters, digits, `_.-` (page_name)
    parts += [f"<script src='{DATA}/{stem}-{k}.js'></script>" for k in sorted(data.chunks)]
    mine = [c for c in change_points if c.test == test]
    parts.append(_change_table(mine, commit_url))
    for variant, kinds in sorted(data.series.items()):
        marks = [c for c in mine if c.variant == variant]
        specs, layout = figure(variant, kinds, position, marks)
        div = _plot_div(f"plot-{hashlib.sha1(variant.encode()).hexdigest()[:10]}", specs, layout)
        parts.append(f"<h2>{html.escape(variant)}</h2><div class='plot'>{div}</div>")
    return _page(test, "\n".join(parts), commit_url, plots=True)


def write_site(history: History, out: Path, *, commit_url: str | None = None) -> list[Path]:
    """Write the whole site of `history` into `out` (created); return the pages written."""
    return _write(None, history, out, commit_url)


def update_site(
    history: History, previous: SiteData, out: Path, *, commit_url: str | None = None
) -> list[Path]:
    """Bring the site in `out` (its manifest: `previous`) up to `history`, main read from
    `previous.reads_from()` on: its settled chunks are kept as they are, the rest is written
    again. `SiteStale` (with why) where `history` does not continue it."""
    return _write(previous, history, out, commit_url)


def _write(
    previous: SiteData | None, history: History, out: Path, commit_url: str | None
) -> list[Path]:
    import plotly.offline

    axis, start = advance(previous, history.commits)
    position = {sha: i for i, sha in enumerate(axis)}
    (out / DATA).mkdir(parents=True, exist_ok=True)
    if previous is None or not (out / PLOTLY_JS).is_file():
        (out / PLOTLY_JS).write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")
    tests = _kept(previous, out)
    _write_chunks(out, history, tests, position, start)
    old = previous.change_points if previous else []
    kept = [c for c in old if position.get(c.commit, start) < start]
    found = kept + [c for c in history.change_points if position.get(c.commit, -1) >= start]
    found.sort(key=lambda c: (-position[c.commit], c.key))
    before = previous.settled if previous else 0
    site = SiteData(axis, history.ordered.how, found, tests, settled(len(axis), before))
    (out / COMMITS_JS).write_text(_commits_script(axis), encoding="utf-8")
    (out / MANIFEST).write_text(json.dumps(site.to_json()), encoding="utf-8")
    written = []
    for test, data in sorted(tests.items()):
        path = out / data.page
        page = _test_page(test, data, site.change_points, position, commit_url)
        path.write_text(page, encoding="utf-8")
        written.append(path)
    index = out / "index.html"
    index.write_text(_index(site, commit_url), encoding="utf-8")
    return [index, *written]


def _kept(previous: SiteData | None, out: Path) -> dict[str, TestData]:
    """What of the previous site stays: its tests with their settled chunks alone. Every
    other chunk of the previous site is removed (an update writes again what it still holds),
    and the page of a test left with none; a whole build starts from an empty `data/`."""
    if previous is None:
        for path in (out / DATA).glob("*.js"):
            path.unlink()
        return {}
    tests = {}
    for test, data in previous.tests.items():
        for k in data.chunks - set(range(previous.settled)):
            chunk_path(out, data.stem, k).unlink(missing_ok=True)
        chunks = {k for k in data.chunks if k < previous.settled}
        if chunks:
            tests[test] = replace(data, chunks=chunks)
        else:
            (out / data.page).unlink(missing_ok=True)
    return tests


def _write_chunks(
    out: Path,
    history: History,
    tests: dict[str, TestData],
    position: Mapping[str, int],
    start: int,
) -> None:
    """Each test's chunks from place `start` on, from `history`."""
    by_test: dict[str, list[Series]] = {}
    for s in [*history.series, *speedups(history.series)]:
        by_test.setdefault(s.test, []).append(s)
    for test, series in by_test.items():
        chunks = chunks_of(series, position, len(position), start, lambda m: SCALE.get(m, 1.0))
        if not chunks:
            continue
        data = tests.setdefault(test, TestData(page_name(test)))
        for s in series:
            kinds = data.series.setdefault(s.variant, {})
            banded = kinds.get((s.machine, s.metric), False) or bool(len(s.low))
            kinds[(s.machine, s.metric)] = banded
        for k, chunk in chunks.items():
            write_chunk(out, data.stem, k, chunk)
            data.chunks.add(k)


def _commits_script(commits: Sequence[str]) -> str:
    """Main's commits, in the order of the plots' axis (a point's x is its place)."""
    return f"window.PERFGUARD_COMMITS={_script_json(list(commits))};\n"


def _index(site: SiteData, commit_url: str | None) -> str:
    links = "".join(
        f"<li><a href='{d.page}'>{html.escape(t)}</a></li>"
        for t, d in sorted(site.tests.items())
        if t != RUN_TEST
    )
    cost = (
        f"<p>What each commit's run cost on its runners: <a href='{site.tests[RUN_TEST].page}'>"
        "runner time per commit</a>.</p>"
        if RUN_TEST in site.tests
        else ""
    )
    summary = (
        f"{len(site.commits)} commits of main, {site.how}; machines: {', '.join(site.machines)}"
    )
    body = (
        f"<h1>perfguard: main's history</h1><p>{html.escape(summary)}</p>{cost}"
        f"<h2>Change points, newest first</h2>{_change_table(site.change_points, commit_url)}"
        f"<h2>Tests</h2><ul>{links}</ul>"
    )
    return _page("perfguard history", body, commit_url)
