"""Instruction counts under callgrind: regions, dumps, verdicts, the plugin's wiring."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.measure.callgrind import (
    CallgrindError,
    Counted,
    build_shim,
    parse_dumps,
    parse_modes,
    run_counted,
)
from perfguard.orders import Orders, from_environment
from perfguard.pytest_plugin import instructions
from perfguard.pytest_plugin.instructions import count_instructions, regions_for
from perfguard.pytest_plugin.options import Options, default_options
from perfguard.records import Counters
from perfguard.stats.exact import exact_comparisons
from tests.factories import result
from tests.test_plugin import FAST

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("cc") is None,
    reason="needs valgrind (with its headers) and a C compiler",
)


def test_modes_are_a_closed_list_in_a_fixed_order() -> None:
    assert parse_modes("forward, compile") == ("compile", "forward")
    assert parse_modes("compile") == ("compile",)
    for bad in ("", "compile,warp", ","):
        with pytest.raises(ValueError, match="expected a list of compile, forward"):
            parse_modes(bad)


def _dump(path: Path, trigger: str, total: int) -> None:
    path.write_text(
        "version: 1\ncreator: callgrind-3.19.0\n"
        f"desc: Trigger: {trigger}\n\npositions: line\nevents: Ir\nsummary: 0\n\n"
        f"fl=(1) x.c\nfn=(1) f\n1 {total}\n\ntotals: {total}\n"
    )


def test_dumps_give_each_region_its_total_and_the_exit_dump_is_left_out(tmp_path: Path) -> None:
    _dump(tmp_path / "callgrind.out.41.1", "Client Request: compile", 1_503_944_127)
    _dump(tmp_path / "callgrind.out.41.2", "Client Request: forward", 9_254_687)
    _dump(tmp_path / "callgrind.out.41", "Program termination", 0)
    assert parse_dumps(tmp_path) == {"compile": 1_503_944_127, "forward": 9_254_687}


def test_instruction_counts_gate_past_their_tolerance_only() -> None:
    base = Counters(compile_instructions=1_000_000, forward_instructions=10_000)

    def verdicts(head: Counters, pct: float = 1.5) -> dict[str, tuple[str, bool]]:
        return {
            c.metric: (c.verdict, c.gating)
            for c in exact_comparisons(
                "t", "compile-default", base, head, gate_ops=False, instructions_pct=pct
            )
        }

    same = replace(base, compile_instructions=1_004_000)  # +0.4%: noise of the count
    assert verdicts(same) == {
        "compile_instructions": ("unchanged", True),
        "forward_instructions": ("unchanged", True),
    }
    more = replace(base, compile_instructions=1_030_000, forward_instructions=9_000)
    assert verdicts(more) == {
        "compile_instructions": ("regression", True),
        "forward_instructions": ("improvement", True),
    }
    assert verdicts(more, pct=5.0)["compile_instructions"] == ("unchanged", True)
    # a side that was not counted gives no comparison
    assert "compile_instructions" not in verdicts(Counters(forward_instructions=10_000))


def test_compile_counts_apply_to_compiled_variants_and_forward_to_every_variant() -> None:
    modes = ("compile", "forward")
    assert regions_for("eager", modes) == ("forward",)
    assert regions_for("int8-dynamic+compile-max-autotune", modes) == modes
    assert regions_for("eager", ("compile",)) == ()
    assert regions_for("pytest-benchmark", modes) == ()  # recorded, not measured by us


def _options(modes: tuple[str, ...]) -> Options:
    return default_options(Path("."), budget_s=1.0, repeats=3, device="cpu", instructions=modes)


def test_each_item_is_counted_in_its_own_process_and_failures_are_notes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(instructions, "build_shim", lambda: tmp_path / "shim.so")
    results = [
        result("t", "eager", 1.0),
        result("t", "compile-default", 1.0),
        replace(result("u", "compile-default", 1.0), status="error", error="boom"),
        result("v", "compile-default", 1.0),
    ]
    nodeids = {r.key: f"test_x.py::{r.test}[{r.variant}]" for r in results}
    calls: list[tuple[str, tuple[str, ...]]] = []

    def fake(
        command: Sequence[str],
        cwd: Path,
        modes: Sequence[str],
        told: Mapping[str, str],
        timeout: float,
    ) -> Counted:
        calls.append((command[-1], tuple(modes)))
        assert command[:3] == [sys.executable, "-m", "pytest"] and cwd == tmp_path
        orders = from_environment(told)
        assert "--perfguard-compare=none" in command and orders.shim == str(tmp_path / "shim.so")
        assert orders.instructions == tuple(modes)
        if command[-1].startswith("test_x.py::v"):
            return Counted({}, "callgrind counted no compile (exit code 1): FAILED ...", 3.0)
        return Counted({"compile": 1234, "forward": 56}, None, 3.0)

    said: list[str] = []
    out = count_instructions(
        tmp_path, _options(("compile",)), [], results, nodeids, said.append, run=fake
    )
    # eager has no compile to count; an item that failed is not run again
    assert calls == [
        ("test_x.py::t[compile-default]", ("compile",)),
        ("test_x.py::v[compile-default]", ("compile",)),
    ]
    assert out[0] == results[0] and out[2] == results[2]
    assert out[1].counters is not None and out[1].counters.compile_instructions == 1234
    assert out[3].counters is not None and out[3].counters.compile_instructions is None
    assert out[3].details.notes[-1].startswith("instructions: callgrind counted no compile")
    assert len(said) == 4


def test_no_valgrind_is_a_note_on_each_item_not_a_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def missing() -> Path:
        raise CallgrindError("valgrind is not installed")

    monkeypatch.setattr(instructions, "build_shim", missing)
    results = [result("t", "compile-default", 1.0)]
    out = count_instructions(
        tmp_path, _options(("compile",)), [], results, {results[0].key: "x"}, print
    )
    assert out[0].counters == results[0].counters
    assert out[0].details.notes == ("instructions not counted: valgrind is not installed",)


@pytest.mark.slow
def test_a_bad_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_plain():\n    pass\n")
    got = pytester.runpytest_subprocess("--perfguard", "--perfguard-instructions=compile,warp")
    assert got.ret == pytest.ExitCode.USAGE_ERROR
    assert "--perfguard-instructions: expected a list of compile, forward" in got.stderr.str()


@pytest.mark.slow
def test_no_valgrind_when_asked_is_a_usage_error_before_measuring(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_user="def test_plain():\n    pass\n")
    empty = pytester.mkdir("empty-bin")
    pytester._monkeypatch.setenv("PATH", str(empty))
    got = pytester.runpytest_subprocess("--perfguard", "--perfguard-instructions=compile")
    assert got.ret == pytest.ExitCode.USAGE_ERROR
    assert "--perfguard-instructions: valgrind is not installed" in got.stderr.str()


COUNTED = (
    "from perfguard.measure.callgrind import counted_regions\n"
    "from perfguard.orders import from_environment\n"
    "orders = from_environment()\n"
    "modes, regions = counted_regions(orders.instructions, orders.shim)\n"
    "with regions.count('forward'):\n"
    "    sum(i * i for i in range({n}))\n"
)


@pytest.mark.slow
@needs_valgrind
def test_a_region_is_counted_alike_in_every_process_and_more_work_counts_more(
    tmp_path: Path,
) -> None:
    shim = build_shim(tmp_path / "cache")
    told = Orders(instructions=("forward",), shim=str(shim)).env()

    def count(n: int) -> int:
        got = run_counted(
            [sys.executable, "-c", COUNTED.format(n=n)], tmp_path, ("forward",), told, 120
        )
        assert got.error is None, got.error
        return got.counts["forward"]

    first, again, more = count(20_000), count(20_000), count(40_000)
    assert abs(again - first) / first < 0.01
    assert more > 1.5 * first
    missing = run_counted([sys.executable, "-c", "pass"], tmp_path, ("forward",), told, 120)
    assert missing.counts == {} and missing.error is not None
    assert missing.error.startswith("callgrind counted no forward (exit code 0)")


@pytest.mark.slow
@needs_valgrind
def test_the_plugin_counts_a_forward_call_under_callgrind(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
import pytest, torch

@pytest.mark.perfguard(variants=["eager"])
def test_lin(perfguard):
    perfguard.run(torch.nn.Linear(16, 16).eval(), (torch.randn(4, 16),))
"""
    )
    got = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-instructions=forward", "--perfguard-json=out.json"
    )
    assert got.ret == 0, got.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    [counted] = doc["results"]
    assert counted["counters"]["forward_instructions"] > 10_000
    assert counted["counters"]["compile_instructions"] is None
    got.stdout.fnmatch_lines(["*counting instructions (forward) under callgrind, 1 of 1*"])
