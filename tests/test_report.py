"""The Markdown report: a golden file, and escaping of what comes from tests."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.comment import COMMENT_LIMIT
from perfguard.records import BaselineRef, Run, VariantResult
from perfguard.report import render_markdown, summary_lines
from perfguard.report.outputs import write_reports
from perfguard.stats.verdicts import compare_runs
from tests import chromium
from tests.factories import result, run

GOLDEN = Path(__file__).parent / "golden"


def sample_run() -> object:
    base = run(
        [
            result("m.py::test_mlp", "eager", 1.0, seed=1),
            result("m.py::test_mlp", "compile-default", 0.5, seed=2, compile_s=3.0),
            result("m.py::test_cnn", "eager", 2.0, seed=3),
        ]
    )
    head = run(
        [
            result("m.py::test_mlp", "eager", 1.6, seed=4),
            result("m.py::test_mlp", "compile-default", 0.5, seed=5, compile_s=3.1),
            result("m.py::test_cnn", "eager", 2.0, seed=6),
            VariantResult(
                test="m.py::test_cnn",
                variant="int8-dynamic",
                status="error",
                error="RuntimeError: no kernel\nfor this op",
            ),
        ],
        commit="b" * 40,
    )
    return replace(
        head,
        baseline=BaselineRef(
            commit="a" * 40,
            reason="merge-base of HEAD with main",
            environment={**base.environment, "torch": "2.12.0"},
        ),
        comparisons=compare_runs(base, head),
    )


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("PERFGUARD_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; rerun with PERFGUARD_UPDATE_GOLDEN=1"


def test_report_golden() -> None:
    text = render_markdown(sample_run())  # type: ignore[arg-type]
    check_golden("report_basic.md", text)
    assert "## perfguard: 2 regression(s) in 1 of 4 test variant(s)" in text


def test_terminal_golden_fits_100_columns() -> None:
    lines = summary_lines(sample_run())  # type: ignore[arg-type]
    assert max(len(line) for line in lines) <= 100
    check_golden("terminal_basic.txt", "\n".join(lines) + "\n")


def test_hostile_names_cannot_break_a_row() -> None:
    nasty = "m.py::test_x[a|b<script>alert(1)</script>`code`\nnext]"
    head = run(
        [
            result(nasty, "eager", 1.0),
            VariantResult(
                test=nasty, variant="onnxruntime", status="error", error="bad | thing\n<img src=x>"
            ),
        ]
    )
    text = render_markdown(head)
    rows = [line for line in text.splitlines() if line.startswith("| m.py")]
    assert rows, text
    for row in rows:
        assert "<script>" not in row and "<img" not in row and "`" not in row
        # every cell separator is one of ours: the data's pipe is escaped
        assert row.count("|") in {5, 14}


def _tables(markdown: str) -> list[tuple[int, list[int]]]:
    """(header cells, cells per body row) of every table, as GitHub's cmark renders them."""
    import re

    cmarkgfm = __import__("pytest").importorskip("cmarkgfm")
    html = cmarkgfm.github_flavored_markdown_to_html(markdown)
    out = []
    for table in re.findall(r"<table>.*?</table>", html, re.S):
        head, _, body = table.partition("</thead>")
        rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
        out.append(
            (len(re.findall(r"<th[ >]", head)), [len(re.findall(r"<td[ >]", r)) for r in rows])
        )
    return out


def test_rendered_tables_keep_their_columns() -> None:
    text = render_markdown(sample_run())  # type: ignore[arg-type]
    tables = _tables(text)
    assert len(tables) >= 4
    for header, rows in tables:
        assert rows and all(n == header for n in rows)


def test_hostile_data_survives_rendering_without_markup() -> None:
    import cmarkgfm

    nasty = "m.py::test_x[a|b<script>alert(1)</script>`code`\nnext]"
    head = run(
        [
            result(nasty, "eager", 1.0),
            VariantResult(
                test=nasty, variant="onnxruntime", status="error", error="bad | thing\n<img src=x>"
            ),
        ]
    )
    text = render_markdown(head)
    for header, rows in _tables(text):
        assert all(n == header for n in rows)
    html = cmarkgfm.github_flavored_markdown_to_html(text)
    assert "<script" not in html and "<img" not in html and "<code>code" not in html


def big_suite(tests: int = 600, variants: int = 8, regressed: int = 150) -> tuple[Run, Run]:
    """The base and head runs of a suite of `tests` x `variants`; the first `regressed` tests
    got slower by 20% to 170% (8 calls a repeat: the verdicts are decided on the repeats)."""
    names = [
        "eager",
        "compile-default",
        "compile-max-autotune",
        "int8-dynamic",
        "int8-weight-only",
        "prune-l1:0.5",
        "amp-bf16",
        "onnxruntime",
    ][:variants]
    base_results, head_results = [], []
    for t in range(tests):
        node = f"tests/perf/test_zoo.py::test_model[resnet_block-{t:04d}|<b>x</b>]"
        for v, variant in enumerate(names):
            seed = t * 100 + v
            base_results.append(result(node, variant, 1.0 + v * 0.1, seed=seed, per_block=8))
            slower = 1.0 + (0.2 + t / 100) * (t < regressed and v == 0)
            center = (1.0 + v * 0.1) * slower
            head_results.append(result(node, variant, center, seed=seed + 7, per_block=8))
    return run(base_results), run(head_results, commit="c" * 40)


def big_run(tests: int = 600, variants: int = 8, regressed: int = 150) -> Run:
    """`big_suite`'s head, compared with its base (the regressions with a trend)."""
    base, head = big_suite(tests, variants, regressed)
    comparisons = compare_runs(base, head)
    trended = tuple(
        replace(c, trend=tuple((f"{i:040x}", 1.0 + i * 0.01) for i in range(8)))
        if c.verdict == "regression"
        else c
        for c in comparisons
    )
    return replace(
        head,
        baseline=BaselineRef(
            commit="a" * 40, reason="merge-base of HEAD with main", environment=base.environment
        ),
        comparisons=trended,
    )


@pytest.mark.slow
def test_a_600_by_8_suite_fits_a_comment_and_leads_with_its_worst() -> None:
    big = big_run()
    full = render_markdown(big, limit=None)
    assert len(full) > COMMENT_LIMIT  # the test is only worth something if trimming is needed
    text = render_markdown(big)
    assert len(text) <= COMMENT_LIMIT
    regressions = sorted(
        (c for c in big.comparisons if c.verdict == "regression"),
        key=lambda c: -(c.change_pct or 0),
    )
    assert len(regressions) > 100
    section = text.split("### Regressions", 1)[1].split("###", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| tests/")]
    assert len(rows) >= 20  # still lists a good number of them
    worst = regressions[0]
    assert f"{worst.change_pct:+.1f}%" in rows[0]  # worst first
    assert "This report was trimmed to fit a GitHub comment" in text
    assert "the table of all 4,800 results" in text
    for header, body in _tables(text):
        assert all(n == header for n in body)


@pytest.mark.slow
def test_a_suite_where_every_test_regressed_still_names_its_worst_regressions() -> None:
    """Every test's eager slower (600 tests, two variants each): the ten-second table once
    listed every one of the 1,200 regressions whatever the trimming, outgrew the comment
    alone, and the report was cut to a count ("Left out: 1200 of 1200 regressions") naming
    no test. (The other variants' unchanged rows are the 600-by-8 test's.)"""
    big = big_run(tests=600, variants=2, regressed=600)
    text = render_markdown(big)
    assert len(text) <= COMMENT_LIMIT
    regressions = sorted(
        (c for c in big.comparisons if c.verdict == "regression"),
        key=lambda c: -(c.change_pct or 0),
    )
    assert len(regressions) >= 1200
    section = text.split("### Regressions", 1)[1].split("###", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| tests/")]
    assert len(rows) >= 100
    assert f"{regressions[0].change_pct:+.1f}%" in rows[0]  # the worst, first
    left_out = text.split("Left out: ", 1)[1].split(" regressions (the mildest)", 1)[0]
    cut, whole = (int(n) for n in left_out.split(" of "))
    assert whole >= 1200 and cut <= whole - 100  # a hundred and more named


@pytest.mark.slow
def test_trimming_degrades_step_by_step() -> None:
    big = big_run(tests=60, variants=4, regressed=10)
    full = render_markdown(big, limit=None)
    assert "This report was trimmed" not in full
    just_under = render_markdown(big, limit=len(full) - 1)
    assert "Unchanged and other comparisons" not in just_under  # the first to go
    assert "<summary>240 results</summary>" in just_under  # the results table stays
    tiny = render_markdown(big, limit=3000)
    assert len(tiny) <= 3000 and "## perfguard: 20 regression(s) in 10 of 240" in tiny


def test_templates_compiled_ahead_are_not_compiled_again_by_a_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`compile_templates` (a process that forks sessions calls it once for all of them)
    leaves a report nothing to parse or compile."""
    from perfguard.report import markdown

    markdown._environment.cache_clear()  # a new process's: nothing compiled yet
    markdown.compile_templates()

    def compiled_again(*args: object, **kwargs: object) -> None:
        raise AssertionError("a template was compiled while rendering")

    monkeypatch.setattr(markdown._environment(), "compile", compiled_again)
    text = render_markdown(big_run(tests=3, variants=2, regressed=1), limit=None)
    assert "## perfguard" in text and "<summary>6 results</summary>" in text


def test_regressions_get_a_trend_chart_that_data_cannot_break() -> None:
    text = render_markdown(big_run(tests=3, variants=1, regressed=1))
    assert text.count("```mermaid") == 2  # p50 and p95 of the one regressed test
    for chart in [part.split("```", 1)[0] for part in text.split("```mermaid")[1:]]:
        assert "xychart-beta" in chart and "line [" in chart
        title = chart.split('title "', 1)[1].split('"', 1)[0]
        assert "<" not in title and "|" not in title and "`" not in title
        assert '"ccccccc (this run)"' in chart


def test_speed_up_against_eager_is_shown() -> None:
    text = render_markdown(sample_run(), limit=None)  # type: ignore[arg-type]
    row = next(
        line
        for line in text.splitlines()
        if line.startswith("| m.py::test&#95;mlp | compile-default | ")
    )
    assert "×" in row


@pytest.mark.slow
def test_write_reports_keeps_the_full_report_and_fills_the_step_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    big = big_run(tests=60, variants=4, regressed=10)
    written = write_reports(big, tmp_path / "perfguard.md", limit=20_000)
    assert written.full == tmp_path / "perfguard-full.md"
    assert len((tmp_path / "perfguard.md").read_text()) <= 20_000
    assert "`perfguard-full.md` beside this report" in (tmp_path / "perfguard.md").read_text()
    assert (tmp_path / "perfguard-full.md").read_text() == render_markdown(big, limit=None)
    assert summary.read_text().startswith("earlier step\n<!-- perfguard-report -->")
    # a later report that fits removes the stale full file
    small = write_reports(sample_run(), tmp_path / "perfguard.md", step_summary=False)  # type: ignore[arg-type]
    assert small.full is None and not (tmp_path / "perfguard-full.md").exists()


def test_mentions_and_control_characters_in_test_data_are_neutralised() -> None:
    nasty = "m.py::test_ping_@octo-org/maintainers_and_@alice[a\x00b\u202eevil\u2066x\x1b[31m]"
    head = run(
        [
            result(nasty, "eager", 1.0),
            VariantResult(test=nasty, variant="int8", status="error", error="cc @bob\x07"),
        ]
    )
    text = render_markdown(head)
    assert "@octo-org" not in text and "@alice" not in text and "@bob" not in text
    for bad in ("\x00", "\u202e", "\u2066", "\x1b", "\x07"):
        assert bad not in text
    assert "U+202E" in text  # shown, not hidden


def test_test_ids_never_mention_reference_or_link_on_github() -> None:
    """GitHub decodes entities before it links mentions, `#123` and bare URLs: a zero-width
    space after the sign is what keeps them text (shown, never linked, nobody notified)."""
    from perfguard.report.format import ZWSP, cell

    text = cell("t.py::test_@alice_@octo/team_#123_https://evil.example/x_WWW.evil.example")
    for linked in ("@alice", "@octo", "#123", "https://evil", "WWW.evil"):
        assert linked not in text
    assert f"@{ZWSP}alice" in text and f"#{ZWSP}123" in text
    assert "&#64;" not in text and "&#35;" not in text  # entities: GitHub undoes them
    assert cell("a_b").replace("&#95;", "_") == "a_b"  # markdown is still escaped


# ---- read in ten seconds: regressions by test, at GitHub's comment width -------------------

VARIANTS = ("eager", "compile-default", "compile-reduce-overhead", "int8-dynamic", "amp-bf16")
COMMENT_WIDTH_PX = 780  # a PR comment's body on a 1280-pixel screen


def widened_run() -> Run:
    """make demo's case: one widened MLP, slower in five variants, p50 and p95 each."""
    test = "tests/test_models.py::test_mlp"
    base = run([result(test, v, 1.0, seed=i) for i, v in enumerate(VARIANTS)])
    head = run(
        [result(test, v, 1.5 + 0.3 * i, seed=10 + i) for i, v in enumerate(VARIANTS)],
        commit="b" * 40,
    )
    return replace(
        head,
        baseline=BaselineRef(commit="a" * 40, reason="merge-base of HEAD with main"),
        comparisons=compare_runs(base, head),
    )


def test_regressions_read_one_line_per_test_and_metric_worst_variant_first() -> None:
    import cmarkgfm
    from cmarkgfm.cmark import Options

    text = render_markdown(widened_run())
    grouped = text.split("### Regressions")[1].split("<details>")[0]
    rows = [line for line in grouped.splitlines() if line.startswith("| tests/")]
    assert len(rows) == 2  # p50 and p95: ten regressions in two lines
    assert rows[0].index("amp-bf16 +") < rows[0].index("int8-dynamic +") < rows[0].index("eager +")
    html = cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)
    details = html.split("<details><summary>Each regression's statistics")[1].split("</details>")[0]
    assert "<table>" in details  # the statistics table, folded, renders as a table
    assert "e+0" not in details  # Cohen's d as a number a reader compares, not 1.4e+02


@pytest.mark.slow
@chromium.needed
def test_the_regressions_fit_a_github_comments_width_in_a_browser(tmp_path: Path) -> None:
    """Rendered as GitHub renders a comment (cmark-gfm; tables scroll sideways rather than
    wrap the page) in headless Chromium at a comment's width: the regressions table needs no
    sideways scrolling. (The statistics table in its fold may.)"""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    body = cmarkgfm.github_flavored_markdown_to_html(
        render_markdown(widened_run()), options=Options.CMARK_OPT_UNSAFE
    )
    page = tmp_path / "comment.html"
    page.write_text(
        "<html><head><style>"
        f"body {{ width: {COMMENT_WIDTH_PX}px; margin: 0; font: 14px sans-serif; }}"
        "table { display: block; max-width: 100%; overflow: auto; border-collapse: collapse; }"
        "td, th { padding: 6px 13px; border: 1px solid #d1d9e0; }"
        "</style></head><body>"
        f"{body}"
        "<script>var t = document.querySelector('h3 + table');"
        "document.body.setAttribute('data-scroll', t.scrollWidth - t.clientWidth);</script>"
        "</body></html>"
    )
    done = chromium.dump_dom(
        page, tmp_path / "profile", f"--window-size={COMMENT_WIDTH_PX + 40},2000"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'data-scroll="(-?\d+)"', done.stdout)
    assert found is not None, done.stdout[:2000]
    assert int(found.group(1)) <= 0, "the regressions table scrolls sideways in a comment"
