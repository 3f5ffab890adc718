"""Files written all or nothing: a temp file beside the target, fsync, rename, fsync the
folder. A save killed at any moment leaves the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same folder, fsync, rename, fsync the folder: all or nothing.

    The file gets the permissions a plain `open` would give (0666 less the umask), not the
    0600 of a temp file: baselines are shared with the CI user and the team.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # created 0666 for the kernel to apply the umask (mkstemp's would be 0600, and reading
    # the umask means setting it, process-wide)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json_atomic(path: Path, data: object) -> None:
    """Write `data` as JSON, all or nothing (see `write_bytes_atomic`)."""
    write_bytes_atomic(path, (json.dumps(data, indent=1) + "\n").encode("utf-8"))


def remove_stale_temp_files(folder: Path) -> None:
    """Temp files of a save that was killed before its rename (the caller holds the lock,
    so no save is writing one now)."""
    if folder.is_dir():
        for tmp in folder.glob(".*.json*.tmp"):
            tmp.unlink(missing_ok=True)
