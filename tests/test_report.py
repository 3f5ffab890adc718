"""The Markdown report: a golden file, and escaping of what comes from tests."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from perfguard.records import BaselineRef, VariantResult
from perfguard.report import render_markdown, summary_lines
from perfguard.stats.verdicts import compare_runs
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
                "m.py::test_cnn", "int8-dynamic", "error", "RuntimeError: no kernel\nfor this op"
            ),
        ],
        commit="b" * 40,
    )
    return replace(
        head,
        baseline=BaselineRef(
            "a" * 40, "merge-base of HEAD with main", {**base.environment, "torch": "2.12.0"}
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
            VariantResult(nasty, "onnxruntime", "error", "bad | thing\n<img src=x>"),
        ]
    )
    text = render_markdown(head)
    rows = [line for line in text.splitlines() if line.startswith("| m.py")]
    assert rows, text
    for row in rows:
        assert "<script>" not in row and "<img" not in row and "`" not in row
        # every cell separator is one of ours: the data's pipe is escaped
        assert row.count("|") in {5, 12}


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
            VariantResult(nasty, "onnxruntime", "error", "bad | thing\n<img src=x>"),
        ]
    )
    text = render_markdown(head)
    for header, rows in _tables(text):
        assert all(n == header for n in rows)
    html = cmarkgfm.github_flavored_markdown_to_html(text)
    assert "<script" not in html and "<img" not in html and "<code>code" not in html
