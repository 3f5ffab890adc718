"""Write the options table and the marker keys of docs/reference.md from perfguard.settings
(the table is data; this is how the docs show it).

Run:  .venv/bin/python tools/settings_table.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from perfguard.settings import MARKER_KEYS, OPTIONS

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference.md"

BEGIN = "<!-- settings: written by tools/settings_table.py from perfguard/settings.py -->"
END = "<!-- settings: end -->"


def generated_section() -> str:
    """What docs/reference.md holds between `BEGIN` and `END`."""
    return f"{BEGIN}\n{markdown_table()}\n\n{marker_keys_text()}\n{END}"


def markdown_table() -> str:
    """The options table of docs/reference.md."""
    rows = [
        "| option | ini | meaning |",
        "| --- | --- | --- |",
        "| `--perfguard` | | measure; without it perf items are skipped |",
    ]
    for s in OPTIONS:
        flag = s.flag if s.switch else f"{s.flag}={s.metavar}"
        if s.bare is not None:  # the value may be left out
            flag = f"{s.flag}[={s.metavar}]"
        text = s.doc or s.help
        shown = s.default_text
        if shown and s.doc is None:
            text += f" (default: {shown})"
        rows.append(f"| `{flag.replace('|', chr(92) + '|')}` | `{s.ini}` | {text} |")
    return "\n".join(rows)


def marker_keys_text() -> str:
    """The marker keys' paragraph of docs/reference.md."""
    parts = []
    for key, s in MARKER_KEYS.items():
        shown = s.default_text
        if s.option:
            parts.append(f"`{key}` (`{s.flag}`)")
        else:
            parts.append(f"`{key}` ({s.help}" + (f"; default {shown})" if shown else ")"))
    return (
        "Marker keys: "
        + ", ".join(parts)
        + ". A key with an option beside it sets for one test what the option sets for all. "
        "An unknown key or a bad value is an error naming the test and the key."
    )


def rewritten(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + generated_section() + text[end:]


def main(argv: list[str]) -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = rewritten(text)
    if "--check" in argv:
        if new != text:
            print(f"{PAGE} is out of date: run tools/settings_table.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
