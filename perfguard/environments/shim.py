"""This perfguard, importable from another environment's interpreter.

Both sides of an A/B run measure with the same perfguard: the head's. A worker started with
another environment's interpreter (the base's, or one `--perfguard-ab-env` names) finds
perfguard in a folder of its own, first on its path: a link to this installation's package
and a small distribution record whose entry point registers the pytest plugin, so the other
environment's own perfguard, if it has one, is never imported. Nothing else of this
environment is on that path: every other package comes from the other environment.
"""

from __future__ import annotations

from pathlib import Path

from perfguard.version import __version__


def make_shim(folder: Path) -> Path:
    """A folder holding this perfguard (a link) and its distribution record; `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    package = Path(__file__).resolve().parent.parent
    link = folder / "perfguard"
    if not link.exists():
        link.symlink_to(package, target_is_directory=True)
    info = folder / f"perfguard-{__version__}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: perfguard\nVersion: {__version__}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[pytest11]\nperfguard = perfguard.pytest_plugin\n", encoding="utf-8"
    )
    (info / "top_level.txt").write_text("perfguard\n", encoding="utf-8")
    return folder
