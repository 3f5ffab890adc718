"""Every bound is declared once, on its row of the settings table, and checked once for every
source: the command line, the ini file, the marker, `perfguard.run(...)`'s options and a
results file. Each row's out-of-bounds values get the same one-line refusal from each."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from perfguard.bounds import Bounds, SettingError, check
from perfguard.pytest_plugin.fixture import RUN_OPTIONS, PerfguardFixture
from perfguard.pytest_plugin.marker import read_marker
from perfguard.pytest_plugin.options import _read
from perfguard.records import RecordError, Run
from perfguard.settings import BY_FIELD, RECORDED, SETTINGS, MarkerSettings, Setting
from perfguard.stats.thresholds import Thresholds
from tests.factories import run as run_of

BOUNDED = [s for s in SETTINGS if s.bounds is not None]


def outside(b: Bounds) -> list[float]:
    """Values just past each bound, and a fraction where whole numbers are asked."""
    values: list[float] = []
    if b.low > -math.inf:
        values.append(b.low if b.above else (b.low / 2 if b.low > 0 else b.low - 1))
    if b.high < math.inf:
        values.append(b.high if b.below else b.high * 2)
    if b.whole:
        values.append(max(b.low, 0) + 1.5)
    return [int(v) if v == int(v) and b.whole else v for v in values]


def refusals(s: Setting, value: float, root: Path) -> dict[str, str]:
    """What each source that takes `s` says of `value`."""
    said: dict[str, str] = {}

    def catch(source: str, fn: Any) -> None:
        with pytest.raises((pytest.UsageError, SettingError, RecordError, TypeError)) as info:
            fn()
        said[source] = str(info.value)

    text = str(value)
    if s.option:
        catch(s.flag, lambda: _read(s, text, s.flag, root))
        catch(f"ini {s.ini}", lambda: _read(s, text, f"ini {s.ini}", root))
    if s.marker:
        mark = pytest.mark.perfguard(**{s.marker: value}).mark
        catch("marker", lambda: read_marker("t.py::test_x", mark))
    if s.marker in RUN_OPTIONS:
        fixture = PerfguardFixture("t.py::test_x", "eager", MarkerSettings(None, {}), None, "x")  # type: ignore[arg-type]
        catch("run()", lambda: fixture._check_call("run", {s.marker: value}))
    if s in (*RECORDED, BY_FIELD["confirm"]):
        doc = run_of([]).to_json()
        doc["settings"] = {**doc["settings"], s.field: value}
        catch("results file", lambda: Run.from_json(doc))
    if s.threshold and s.marker:
        catch("thresholds", lambda: Thresholds.from_json({s.marker: value}))
    return said


@pytest.mark.parametrize("setting", BOUNDED, ids=lambda s: s.name)
def test_each_row_is_refused_alike_by_every_source(setting: Setting, tmp_path: Path) -> None:
    assert setting.bounds is not None
    for value in outside(setting.bounds):
        said = refusals(setting, value, tmp_path)
        assert said, f"{setting.name}: no source takes it"
        words = {message.split(": ")[-1] for message in said.values()}
        assert len(words) == 1, (setting.name, value, said)
        (core,) = words
        assert core.startswith("must be ") and core.endswith(f"got {value}"), core
        for source, message in said.items():
            assert "\n" not in message, (source, message)
            # each names where the value came from: the flag, the ini key, the marker's
            # test and key, the run option, the file's key
            assert (setting.marker or setting.field or setting.flag) in message or (
                setting.flag in message or setting.ini in message
            ), (source, message)


def test_every_source_a_row_has_is_tried() -> None:
    """The marker's numbers and the run's options are the rows with bounds, all of them."""
    numeric_keys = {s.marker for s in SETTINGS if s.marker and set(s.marker_types) <= {int, float}}
    assert numeric_keys == {s.marker for s in BOUNDED if s.marker}
    assert {"budget_s", "repeats", "threads"} <= set(RUN_OPTIONS)


@pytest.mark.parametrize(
    ("bounds", "value", "said"),
    [
        (Bounds(1, 1000, whole=True), 2.5, "must be a whole number, got 2.5"),
        (Bounds(1, 1000, whole=True), 0, "must be a whole number between 1 and 1000, got 0"),
        (Bounds(0, 1, above=True, below=True), 1.0, "must be above 0 and below 1, got 1.0"),
        (Bounds(1, 100, above=True), 1, "must be above 1 and at most 100, got 1"),
        (Bounds(0.001), float("nan"), "must be at least 0.001, got nan"),
        (Bounds(0, 10), True, "must be a number, got True"),
    ],
)
def test_the_words_of_a_refusal(bounds: Bounds, value: Any, said: str) -> None:
    row = Setting(name="x", help="", bounds=bounds)
    with pytest.raises(SettingError) as info:
        check(row, value, "x")
    assert str(info.value) == f"x: {said}"


def test_a_value_within_bounds_is_the_number_the_code_uses() -> None:
    repeats = Setting(name="repeats", help="", bounds=Bounds(1, 1000, whole=True))
    assert check(repeats, 3.0, "x") == 3 and isinstance(check(repeats, 3.0, "x"), int)
    assert check(repeats, "7", "x", text=True) == 7
    budget = Setting(name="budget", help="", bounds=Bounds(0.001, 3600))
    assert check(budget, 2, "x") == 2.0 and isinstance(check(budget, 2, "x"), float)


@pytest.mark.parametrize("row", [s for s in RECORDED if s.choices], ids=lambda s: s.name)
def test_a_results_file_with_a_choice_the_table_lacks_is_refused_by_name(row: Setting) -> None:
    doc = run_of([]).to_json()
    doc["settings"] = {**doc["settings"], row.field: "sometimes"}
    with pytest.raises(RecordError, match=f"settings.{row.field}: must be one of"):
        Run.from_json(doc)
