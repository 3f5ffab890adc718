"""A results or baseline file read: plain or gzip-compressed JSON, brought up to the current
schema, checked; every way it can fail is one `BaselineError` that names the file and says
what to do."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from perfguard.errors import PerfguardError
from perfguard.records import RecordError, Run
from perfguard.store.schema import SchemaError, upgrade
from perfguard.store.unpack import gunzip

_GZIP_MAGIC = b"\x1f\x8b"


class BaselineError(PerfguardError):
    """A baseline or results file that cannot be used; the message names the file."""


def read_run_file(path: Path) -> Run:
    """Read a results or baseline file, plain or gzip-compressed; raise `BaselineError`
    naming it. Never modifies it."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such file") from None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot be read ({exc})") from None
    return parse_run(content, str(path))


def parse_run(content: bytes, where: str) -> Run:
    """The run in a file's bytes (JSON, or JSON compressed with gzip); `BaselineError`
    naming `where` when they are not one."""
    if content.startswith(_GZIP_MAGIC):
        try:
            content = gunzip(content, where, BaselineError)
        except (OSError, EOFError, zlib.error) as exc:
            raise BaselineError(
                f"{where}: a damaged or truncated gzip file ({exc}); move it aside and "
                "measure that commit again with --perfguard-save"
            ) from None
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BaselineError(f"{where}: cannot be read ({exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        complete = text.rstrip().endswith(("}", "]"))
        hint = (
            "it is not valid JSON"
            if complete or not text.lstrip().startswith("{")
            else "it looks truncated"
        )
        raise BaselineError(
            f"{where}: {hint} ({exc.msg} at line {exc.lineno}); move it aside and measure "
            "that commit again with --perfguard-save"
        ) from None
    from perfguard.stats.thresholds import Thresholds

    try:
        run = Run.from_json(upgrade(doc))
        Thresholds.from_json(run.settings.get("thresholds"))  # what a gate would use: checked
        return run
    except SchemaError as exc:
        raise BaselineError(f"{where}: {exc}") from None
    except RecordError as exc:
        raise BaselineError(
            f"{where}: not a perfguard results file ({exc}); move it aside or delete it"
        ) from None
