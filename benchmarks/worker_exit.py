"""How long does an A/B worker take to exit once its session is over?

Run:  .venv/bin/python -m benchmarks.worker_exit [--runs 5]

A worker has imported torch and what measuring imports with it (its profiler and its
compiler, `perfguard.measure.isolation.PRELOAD`). When its pytest session ends, the
interpreter frees every module before the process exits; the driver waits for both workers
before it compares and reports. Each run starts a fresh process that imports those
modules, prints the time, and ends either the usual way (`normal`) or the way
`perfguard.processes.end_worker` ends it (exit handlers run, output flushed, then
`os._exit`: `fast`). The figure is the time from that print to the process's end, in
seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from perfguard.measure.isolation import PRELOAD

CODE = """
import atexit, importlib, os, sys, time
for name in {modules!r}:
    importlib.import_module(name)
print(time.time(), flush=True)
if {fast!r}:
    atexit._run_exitfuncs()
    sys.stdout.flush()
    os._exit(0)
"""


def once(fast: bool) -> float:
    code = CODE.format(modules=("torch", *PRELOAD), fast=fast)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    printed = float(proc.stdout.readline())
    proc.wait()
    return time.time() - printed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    seconds: dict[str, list[float]] = {"normal": [], "fast": []}
    for _ in range(args.runs):  # alternated, so that a slow spell hits both
        for way in seconds:
            seconds[way].append(round(once(fast=way == "fast"), 3))
    for way, values in seconds.items():
        print(f"{way:6s} exit: median {statistics.median(values):.3f} s  {values}")
    if args.out is not None:
        doc = {"modules": ["torch", *PRELOAD], "exit_s": seconds}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
