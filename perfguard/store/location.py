"""Where baselines live: a folder, or an object store's URL (`s3://bucket/prefix`).

Only the standard library: command-line parsers take a location as an argument's type.
"""

from __future__ import annotations

import re
from pathlib import Path

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(where: str | Path) -> bool:
    """Whether a baseline location is a URL (`s3://...`), not a folder."""
    return isinstance(where, str) and bool(_URL.match(where))


def location(value: str | Path) -> Path | str:
    """A baseline location as the user gave it: a folder's path, or a store's URL (a
    `file://` URL is the folder it names)."""
    text = str(value)
    if text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    return text.rstrip("/") if _URL.match(text) else Path(text)
