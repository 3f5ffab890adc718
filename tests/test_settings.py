"""One table of settings: the options, ini keys, marker keys, defaults and docs agree."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from perfguard.pytest_plugin.marker import KEYS
from perfguard.pytest_plugin.options import OPTIONS
from perfguard.settings import MARKER_KEYS, SETTINGS, THRESHOLD_KEYS, threshold_default
from perfguard.stats.verdicts import Thresholds

ROOT = Path(__file__).resolve().parent.parent


def test_the_reference_page_holds_the_table_the_settings_make() -> None:
    check = [sys.executable, str(ROOT / "tools" / "settings_table.py"), "--check"]
    done = subprocess.run(check, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


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


def test_the_session_options_are_the_rows_of_the_table() -> None:
    from perfguard.pytest_plugin.options import READERS, Options

    facts = {"enabled", "sources", "worker", "orders"}
    assert {f.name for f in fields(Options)} == {s.field for s in OPTIONS} | facts
    assert all(s.read in READERS for s in OPTIONS)


CHILD_VALUES = {
    "variants": ("eager", "compile-default"),
    "budget_s": 0.25,
    "timeout_s": 300.0,
    "device": "cuda:1",
    "threads": 3,
    "flush_l2": True,
    "seed": 7,
    "min_change_pct": 12.5,
    "ab_min_change_pct": 4.0,
    "compile_cache": Path("/runner/compile-cache"),
    "import_timeout_s": 120.0,
    "base_env": "same",
    "install": "pip install -e .",
    "env_cache": Path("/runner/envs"),
    "install_timeout_s": 90.0,
    "op_blocks": 5,
}
"""A value other than its default for every setting a child session is given."""


def test_the_child_command_line_comes_from_the_table(tmp_path: Path) -> None:
    from perfguard.pytest_plugin.options import default_options

    children = [s for s in OPTIONS if s.child]
    assert {s.field for s in children} == set(CHILD_VALUES) | {"repeats"}
    ab_only = {s.flag for s in children if s.child == "ab"}
    assert ab_only == {"--perfguard-min-change", "--perfguard-ab-min-change"}
    options = default_options(
        tmp_path,
        sources={
            name: "--perfguard-" + name.replace("_", "-")
            for name in ("variants", "base_env", "install", "env_cache", "install_timeout")
        },
        save=True,  # never a child's: it does not save
        gate_p99=True,
        **CHILD_VALUES,
    )
    args = options.measuring_args(tmp_path, repeats=9, ab="abc123")
    assert "--perfguard-repeats=9" in args  # the caller's count, not the session's
    for field, value in CHILD_VALUES.items():
        flag = next(s.flag for s in children if s.field == field)
        text = ",".join(value) if isinstance(value, tuple) else str(value)
        assert (flag if value is True else f"{flag}={text}") in args, field
    given = {a.split("=")[0] for a in args if a.startswith("--perfguard-")}
    fixed = {
        "--perfguard-ab",
        "--perfguard-confirm",
        "--perfguard-progress",
        "--perfguard-full",
        "--perfguard-record",
    }
    assert given == {s.flag for s in children} | fixed  # nothing else: not save, not gate_p99
    # variants from the ini or the default are left to the child, which reads them itself
    # and a re-measure in a fresh process is given nothing of A/B's
    plain = default_options(tmp_path, threads=None).measuring_args(tmp_path, repeats=1)
    skipped = ("--perfguard-variants", "--perfguard-threads", *ab_only, "--perfguard-ab")
    assert not any(a.startswith(skipped) for a in plain)
    assert "--perfguard-compare=none" in plain


def test_every_rule_with_an_option_reaches_the_verdicts(tmp_path: Path) -> None:
    """A session's Thresholds are built from the rows that are rules and options, not from
    a hand-kept list: each takes the value the session was given."""
    from perfguard.plan import thresholds_of
    from perfguard.pytest_plugin.options import default_options
    from perfguard.pytest_plugin.planning import asked

    rules = [s for s in SETTINGS if s.threshold and s.flag]
    assert {s.name for s in rules} >= {"min_change", "ab_min_change", "gate_p99"}
    given = {s.field: (True if s.read == "switch" else 7.5) for s in rules}
    th = thresholds_of(asked(default_options(tmp_path, **given), tmp_path).rules, {})
    for s in rules:
        assert getattr(th, str(s.marker)) == given[s.field], s.name


def test_the_end_of_a_session_takes_each_setting_from_its_option(tmp_path: Path) -> None:
    """The pipeline's settings take each field from the session's option of that name; what
    the session works out itself is given, and nothing else is left to a default."""
    from perfguard.pipeline import FinishSettings
    from perfguard.pytest_plugin.options import default_options
    from perfguard.pytest_plugin.planning import finish_settings

    worked_out = {
        "root",
        "machine",
        "unsaved_reason",
        "traces",
        "thresholds",
        "given",
        "why_not_compared",
    }
    fixed = {"history_length", "option_prefix"}  # not settings of a session
    by_name = {f.name for f in fields(FinishSettings)} - worked_out - fixed
    assert by_name <= {s.field for s in OPTIONS}
    given = {
        "baseline_dir": "s3://bucket/p",
        "compare": "abc123",
        "main_branch": "trunk",
        "baseline_depth": 7,
        "save": True,
        "save_replace": True,
        "allow_dirty": True,
        "report": tmp_path / "r.md",
        "json": tmp_path / "r.json",
        "unhealthy": "inconclusive",
        "fail_on": "never",
        "confirm": 3,
    }
    assert set(given) == by_name
    settings = finish_settings(default_options(tmp_path, **given), root=tmp_path, machine="m")
    for name, value in given.items():
        assert getattr(settings, name) == value, name
    assert (settings.root, settings.machine) == (tmp_path, "m")
