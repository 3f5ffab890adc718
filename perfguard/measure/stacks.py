"""Where a stuck process is: the line its main thread is on, read from the stack dump that
`faulthandler` writes when the process is signalled (each rank of a distributed step
registers one, so that a rank that hangs is named with its line)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path


def innermost_line(dump: str) -> str | None:
    """`file:line in function` where the rank's main thread is, in a faulthandler dump
    (most recent call first; the main thread's stack is the one that holds `rank_main`)."""
    for thread in dump.split("\n\n"):
        if "rank_main" not in thread:
            continue
        for line in thread.splitlines():
            found = re.match(r'\s*File "(.+)", line (\d+) in (.+)', line)
            if found:
                path, number, function = found.groups()
                return f"{_short(path)}:{number} in {function}"
    return None


def _short(path: str) -> str:
    """A path as a reader finds it: from the working folder, or from site-packages."""
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(Path.cwd()))
    parts = Path(path).parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1 :])
    return path
