"""Instruction counts under valgrind's callgrind: exact where wall time is too noisy.

A measuring session asks for them with `--perfguard-instructions`. Each perf item is then
run once more, in a pytest process of its own under `valgrind --tool=callgrind
--instr-atstart=no`: valgrind runs the interpreter uninstrumented (about 5x slower) until
the item reaches the region to count, where a tiny C library built here
(`perfguard_start`/`perfguard_stop`, callgrind's client requests) turns instrumentation on
and, at the end, dumps the region's totals under its name. Regions:

- `compile`: the first call of a compiled variant, on a fresh inductor cache, in a process
  whose compiler was already warmed on a trivial function (the same cold compile that
  `compile_time_s` times);
- `forward`: one more call of any variant once it is warm.

One process per item keeps each count independent of what ran before it. Only this process
is counted (not the C++ compiler inductor starts), with `PYTHONHASHSEED=0` and inductor's
compile workers kept in-process, so the same code gives the same count to a fraction of a
percent. This module needs no torch: the counting side is `perfguard.measure.instructions`.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from perfguard.errors import PerfguardError

MODES = ("compile", "forward")
DUMP_PREFIX = "callgrind.out"

SHIM_SOURCE = """\
#include <valgrind/callgrind.h>
void perfguard_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void perfguard_stop(const char *name) {
    CALLGRIND_STOP_INSTRUMENTATION;
    CALLGRIND_DUMP_STATS_AT(name);
}
"""


class CallgrindError(PerfguardError, RuntimeError):
    """Instruction counting cannot run here, or a counted process failed; says why."""


def parse_modes(text: str) -> tuple[str, ...]:
    """'compile' or 'compile,forward' -> the regions, in a fixed order; ValueError if bad."""
    asked = {part.strip() for part in text.split(",") if part.strip()}
    unknown = asked - set(MODES)
    if unknown or not asked:
        raise ValueError(
            f"expected a list of {', '.join(MODES)}, got {text!r}"
            + (f" (unknown: {', '.join(sorted(unknown))})" if unknown else "")
        )
    return tuple(m for m in MODES if m in asked)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perfguard"


def build_shim(cache: Path | None = None) -> Path:
    """The start/stop library, compiled once per source and kept in the user's cache.

    Raises `CallgrindError` when valgrind, its headers or a C compiler are missing."""
    if shutil.which("valgrind") is None:
        raise CallgrindError(
            "valgrind is not installed (Debian/Ubuntu: apt-get install valgrind; it brings "
            "callgrind and its headers)"
        )
    digest = hashlib.sha256(SHIM_SOURCE.encode()).hexdigest()[:16]
    folder = cache or _cache_dir()
    shim = folder / f"callgrind-shim-{digest}.so"
    if shim.is_file():
        return shim
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise CallgrindError("no C compiler (cc) to build the callgrind start/stop library")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perfguard-shim-") as tmp:
        source = Path(tmp) / "shim.c"
        source.write_text(SHIM_SOURCE, encoding="utf-8")
        built = Path(tmp) / shim.name
        done = subprocess.run(
            [compiler, "-O1", "-shared", "-fPIC", "-o", str(built), str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise CallgrindError(
                "could not build the callgrind start/stop library (are valgrind's headers, "
                f"valgrind/callgrind.h, installed?): {first}"
            )
        os.replace(built, shim)  # atomic: two sessions building at once both succeed
    return shim


class Regions:
    """In the counted process: `with regions.count("compile"): ...` counts that block."""

    def __init__(self, shim: Path) -> None:
        self._lib = ctypes.CDLL(str(shim))
        self._lib.perfguard_stop.argtypes = [ctypes.c_char_p]

    @contextmanager
    def count(self, name: str) -> Iterator[None]:
        self._lib.perfguard_start()
        try:
            yield
        finally:
            self._lib.perfguard_stop(name.encode())


def counted_regions(
    modes: Sequence[str], shim: str | None
) -> tuple[tuple[str, ...], Regions] | None:
    """The regions this process is asked to count (its orders: the modes and the shim that
    turns counting on and off), or None when it is a measuring process (the usual case)."""
    if not modes or not shim:
        return None
    return parse_modes(",".join(modes)), Regions(Path(shim))


def parse_dumps(folder: Path) -> dict[str, int]:
    """{region: instructions} from the callgrind dumps in `folder` (a region's last dump wins;
    the dump at program exit, outside every region, counts nothing and is left out)."""
    found: dict[str, int] = {}
    for path in sorted(folder.glob(f"{DUMP_PREFIX}*")):
        trigger, total = None, None
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if line.startswith("desc: Trigger: Client Request: "):
                    trigger = line.split(":", 3)[3].strip()
                elif line.startswith("totals:"):  # at the end: the header's summary may be 0
                    total = int(line.split(":", 1)[1].split()[0])
        if trigger in MODES and total is not None:
            found[trigger] = total
    return found


@dataclass(frozen=True)
class Counted:
    """What one counted process gave: instructions per region, or why there are none."""

    counts: Mapping[str, int]
    error: str | None = None
    seconds: float = 0.0


def run_counted(
    command: Sequence[str],
    cwd: Path,
    modes: Sequence[str],
    told: Mapping[str, str],
    timeout_s: float,
) -> Counted:
    """Run `command` (a Python process) under callgrind with only the asked regions counted;
    `told`: the environment that tells it which (its orders: the modes and the shim)."""
    import time

    env = {
        **os.environ,
        **told,
        "PYTHONHASHSEED": "0",  # the same iteration order of sets and dicts every time
        "TORCHINDUCTOR_COMPILE_THREADS": "1",  # compile in this process, where it is counted
    }
    with tempfile.TemporaryDirectory(prefix="perfguard-callgrind-") as tmp:
        folder = Path(tmp)
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={folder / DUMP_PREFIX}.%p",
            "--log-file=" + str(folder / "valgrind.log"),
            *command,
        ]
        began = time.monotonic()
        try:
            done = subprocess.run(
                cmd,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Counted({}, f"the callgrind process ran past {timeout_s:.0f}s")
        except OSError as exc:
            return Counted({}, f"the callgrind process could not start: {exc}")
        seconds = time.monotonic() - began
        counts = parse_dumps(folder)
        missing = [m for m in modes if m not in counts]
        if counts and not missing:
            return Counted(counts, None, seconds)
        output = [line.strip() for line in done.stdout.decode(errors="replace").splitlines()]
        # pytest's summary names a failed item with its message; else the last line says most
        failed = [line for line in output if line.startswith(("FAILED ", "ERROR "))]
        last = (failed or [line for line in output if line] or ["no output"])[-1]
        what = ", ".join(missing)
        return Counted(
            counts,
            f"callgrind counted no {what} (exit code {done.returncode}): {last}",
            seconds,
        )
