"""The folders an A/B session makes in the temporary directory, and their removal after a kill.

A session killed with SIGKILL cannot remove what it made: the base's worktree, the workers'
logs, the socket's folder. Each folder records the pid of the session that made it, and the
next A/B session on the machine removes those whose session is gone (`prune`). Logs kept on
purpose (a worker crashed, and the message names them) are given up by their session and
stay for a week.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

PREFIX = "perfguard-ab-"
OWNER = "owner.pid"
KEPT_S = 7 * 24 * 3600.0
"""How long a folder without an owner stays: kept logs, or a folder of an older version."""


def make(prefix: str = PREFIX) -> Path:
    """A new private folder (`mkdtemp`) that records this process as its owner."""
    assert prefix.startswith(PREFIX)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    (folder / OWNER).write_text(f"{os.getpid()}\n")
    return folder


def give_up(folder: Path) -> None:
    """Keep `folder` after this session (for `KEPT_S`): it no longer has an owner."""
    (folder / OWNER).unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Whether process `pid` runs. A zombie does not: a session killed with SIGKILL whose
    parent died too stays one in a container whose first process reaps nothing."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # no /proc (not Linux), or it ended just now
        return True
    return "\nState:\tZ" not in status


def owner(folder: Path) -> int | None:
    """The pid recorded in `folder`, or None."""
    try:
        return int((folder / OWNER).read_text().strip())
    except (OSError, ValueError):
        return None


def _abandoned(folder: Path, now: float) -> bool:
    pid = owner(folder)
    if pid is not None:
        return not alive(pid)
    try:  # no owner: being made this instant, kept logs, or an older version's
        return now - folder.stat().st_mtime > KEPT_S
    except OSError:
        return False


def prune(tmp: Path | None = None) -> list[Path]:
    """Remove the folders in `tmp` (the temporary directory) whose session is gone; what
    went. Other users' folders are theirs: left alone."""
    tmp = Path(tmp or tempfile.gettempdir())
    now = time.time()
    gone = []
    try:
        candidates = sorted(tmp.glob(f"{PREFIX}*"))
    except OSError:
        return []
    for folder in candidates:
        try:
            mine = folder.is_dir() and folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and _abandoned(folder, now):
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                gone.append(folder)
    return gone
