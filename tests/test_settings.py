"""One table of settings: the options, ini keys, marker keys, defaults and docs agree."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from perfguard.pytest_plugin.marker import KEYS
from perfguard.pytest_plugin.options import OPTIONS
from perfguard.settings import (
    BEGIN,
    END,
    MARKER_KEYS,
    SETTINGS,
    THRESHOLD_KEYS,
    generated_section,
    threshold_default,
)
from perfguard.stats.verdicts import Thresholds

ROOT = Path(__file__).resolve().parent.parent


def test_the_reference_page_holds_the_table_the_settings_make() -> None:
    page = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    written = page[page.index(BEGIN) : page.index(END) + len(END)]
    assert written == generated_section(), "run tools/settings_table.py"


def test_every_setting_has_one_name_one_flag_and_a_help() -> None:
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names))
    flags = [s.flag for s in OPTIONS]
    assert len(flags) == len(set(flags)) and all(f.startswith("--perfguard-") for f in flags)
    assert all(s.help and not s.help.endswith(".") for s in SETTINGS)
    assert "--perfguard-seed" in flags  # the one a user's random weights depend on
    for s in SETTINGS:  # written out, and the ini key's name with dashes
        assert s.flag == ("--perfguard-" + s.name.replace("_", "-") if s.option else "")


def test_the_marker_checks_the_keys_of_the_table() -> None:
    assert set(KEYS) == set(MARKER_KEYS)
    assert all(KEYS[k][0] and KEYS[k][1] for k in KEYS)


def test_the_verdict_rules_default_to_the_table() -> None:
    defaults = Thresholds()
    known = {f.name for f in fields(Thresholds)}
    for key in THRESHOLD_KEYS:
        assert key in known, key
        assert getattr(defaults, key) == threshold_default(key), key
    assert threshold_default("min_change_pct") == 10.0 and threshold_default("alpha") == 0.05
