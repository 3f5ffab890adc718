"""Headless Chromium for the tests that check what a browser shows (the trend site, a PR
comment at GitHub's width)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def find() -> str | None:
    names = ("chromium", "chromium-browser", "google-chrome")  # the last on GitHub's runners
    return next((found for name in names if (found := shutil.which(name))), None)


needed = pytest.mark.skipif(
    find() is None and not os.environ.get("CI"),
    reason="Chromium is not installed (apt-get install chromium); CI requires it",
)
"""Skips where Chromium is missing, except in CI, which must have it."""


def dump_dom(page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Load `page` headless and print its DOM after its scripts ran; `flags` add to the
    command line (a window size, console logging)."""
    browser = find()
    assert browser is not None, "CI needs Chromium for this test: apt-get install chromium"
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            *flags,
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
