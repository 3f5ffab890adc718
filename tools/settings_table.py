"""Write the options table and the marker keys of docs/reference.md from perfguard.settings.

Run:  .venv/bin/python tools/settings_table.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from perfguard.settings import BEGIN, END, generated_section

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference.md"


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
