"""What a session registers with pytest, asked for or not: the options, the ini keys and the
marker's line. Light on purpose: it imports the settings table and nothing else of perfguard
(every pytest process of an environment where perfguard is installed pays for it)."""

from __future__ import annotations

import pytest

from perfguard.settings import ENABLE_HELP, MARKER_KEYS, OPTIONS

MARKER_HELP = (
    "perfguard("
    + ", ".join(k + ("=[...]" if list in s.marker_types else "=") for k, s in MARKER_KEYS.items())
    + "): per-test perfguard settings"
)
"""The marker's line in `pytest --markers`."""


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfguard", "performance regression testing of PyTorch models")
    group.addoption("--perfguard", action="store_true", default=False, help=ENABLE_HELP)
    for opt in OPTIONS:
        if opt.bare is not None:  # the flag alone means `bare` (--perfguard-ab: REF=auto)
            group.addoption(
                opt.flag,
                action="store",
                nargs="?",
                const=opt.bare,
                default=None,
                metavar=opt.metavar,
                help=opt.full_help,
            )
            parser.addini(opt.ini, opt.full_help, type="string", default="")
        elif opt.switch:
            group.addoption(opt.flag, action="store_true", default=None, help=opt.full_help)
            parser.addini(opt.ini, opt.full_help, type="bool", default=bool(opt.default))
        else:
            group.addoption(
                opt.flag, action="store", default=None, metavar=opt.metavar, help=opt.full_help
            )
            parser.addini(
                opt.ini,
                opt.full_help,
                type="string",
                default=opt.default if opt.default is not None else "",
            )
