"""What the exported variants share (`onnxruntime`, `aot-inductor`): the export's output kept
quiet, and an export failure told in one line with the frame it points to."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import traceback
from collections.abc import Iterator

from perfguard.errors import PerfguardError
from perfguard.variants.base import first_line


class ExportError(PerfguardError):
    """The model cannot be exported (a graph break, data-dependent control flow): the item's
    error, with export's own first line and the frame it points to."""


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_SKIPPED = ("/torch/", "/perfguard/", "/onnxscript/", "/onnx/", "<", "/site-packages/")


@contextlib.contextmanager
def quiet_export() -> Iterator[None]:
    """The exporters print progress and log warnings (torchvision ops, onnxscript): silence."""
    out = io.StringIO()
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def export_failure(variant: str, exc: BaseException) -> str:
    """`<variant>: torch.export failed: <its first line> (at file:line in fn)`: the user's
    innermost frame, from the traceback or from the frames the exporter names in its text."""
    where = _user_frame(exc)
    return f"{variant}: torch.export failed: {first_line(exc)}" + (
        f" (at {where})" if where else ""
    )


def _user_frame(exc: BaseException) -> str | None:
    frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__)]
    named = [(m.group(1), int(m.group(2)), m.group(3)) for m in _FRAME.finditer(str(exc))]
    for filename, line, name in reversed([*frames, *named]):
        if not any(part in filename for part in _SKIPPED):
            return f"{filename.rsplit('/', 1)[-1]}:{line} in {name}"
    return None
