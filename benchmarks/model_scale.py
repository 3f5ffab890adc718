"""perfguard's footprint on real-sized models: memory and time against the model's own.

Run:  .venv/bin/python -m benchmarks.model_scale [--sizes 64M,256M,1G,2G] [--modes stored,ab]

For each size, a scratch git repository holds one perf test of a stack of `Linear(d, d)`
layers (fp32 weights of that size, a batch of 8 rows), eager only, as a new user would write
it; its head commit changes a comment, so that `--perfguard-ab` has a base. Three figures
of memory, each the peak over time of the summed VmHWM (each process's own high-water mark)
of the whole process tree, read every 50 ms:

- `model`: a plain Python process that builds the model and calls it 30 times (what the
  model needs, with torch's runtime);
- `stored`: `pytest --perfguard --perfguard-budget=1 --perfguard-repeats=3`;
- `ab`: the same with `--perfguard-ab=HEAD~1` (three processes: the driver and one worker
  per tree).

Besides: the wall time of each session against the seconds spent in timed calls (the sum of
the samples, both trees in A/B), and the peak memory the report gives for the item, against
the model-only peak. Figures go to `benchmarks/data/model-scale.json`. The VM's memory is
24 GiB: the 2 GB model's A/B needs about 2.5 x its size at most.

`--device cuda` (a GPU machine: `make gpu-check`'s `figures` stage): one bf16 model built on the
device, sized to 35% of its memory, eager, stored and A/B; the
figure is the peak the report gives (torch's allocator) against the model alone's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.gitrepo import git

SIZES = {
    "64M": (4, 2048, 8),
    "256M": (4, 4096, 8),
    "1G": (4, 8192, 8),
    "2G": (8, 8192, 8),
    "1G-slow": (4, 8192, 96),
}
"""size -> (layers, width, batch): fp32 weights of layers x width^2 x 4 bytes. `1G-slow` is
the 1 GB model called with 96 rows, about half a second a call on a 2-core CPU: its untimed
work is cut to the budget."""

MODEL = """
import torch
from torch import nn


DEVICE, DTYPE = "{device}", getattr(torch, "{dtype}")


def build():
    torch.manual_seed(0)
    with torch.device(DEVICE):
        layers = [nn.Linear({width}, {width}, bias=False, dtype=DTYPE) for _ in range({layers})]
    return nn.Sequential(*layers).eval()


def inputs():
    return (torch.randn({batch}, {width}, device=DEVICE, dtype=DTYPE),)
"""

TEST = """# {note}
import pytest

from bigmodel import build, inputs


@pytest.mark.perfguard(variants={variants!r})
def test_big(perfguard):
    perfguard.run(build(), inputs())
"""

MODEL_ONLY = """
import os, sys, time, torch
sys.path.insert(0, os.getcwd())
from bigmodel import build, inputs
torch.set_num_threads({threads})
model, args = build(), inputs()
with torch.inference_mode():
    for _ in range(30):
        model(*args)
if torch.cuda.is_available():
    print(torch.cuda.max_memory_allocated())
"""


def _status(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _tree(root: int) -> list[int]:
    """The root and every process descended from it."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, ()))
    return found


@dataclass
class Peak:
    hwm_bytes: int = 0  # the peak over time of the summed VmHWM of the tree
    rss_bytes: int = 0  # the same of the summed VmRSS
    by_process: dict[int, int] = field(default_factory=dict)  # each process's own VmHWM


def run_watched(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[Peak, float, str]:
    """Run `cmd`, reading its process tree's memory every 50 ms: (peak, wall s, output)."""
    peak = Peak()
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            pids = _tree(proc.pid)
            marks = {p: _status(p, "VmHWM") for p in pids}
            for p, mark in marks.items():
                peak.by_process[p] = max(peak.by_process.get(p, 0), mark)
            peak.hwm_bytes = max(peak.hwm_bytes, sum(marks.values()))
            peak.rss_bytes = max(peak.rss_bytes, sum(_status(p, "VmRSS") for p in pids))
            done.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    done.set()
    watcher.join()
    return peak, time.perf_counter() - start, out


@dataclass(frozen=True)
class Shape:
    layers: int
    width: int
    batch: int
    device: str = "cpu"
    dtype: str = "float32"
    variants: tuple[str, ...] = ("eager",)

    @property
    def weights_bytes(self) -> int:
        return self.layers * self.width * self.width * (2 if self.dtype == "bfloat16" else 4)


def gpu_shape() -> Shape:
    """A bf16 stack of Linear(16384, 16384) (512 MiB each) of about 35% of the GPU's memory,
    eager. (Of Linear(8192, 8192), 221 layers on an H100, eager and compile-default, the
    stored session alone outran a 6-minute call: the layers' count, not their size, is what
    the compiler and the per-module work pay for.)"""
    import torch

    _, total = torch.cuda.mem_get_info()
    layers = max(1, int(0.35 * total // (16384 * 16384 * 2)))
    return Shape(layers, 16384, 16, "cuda", "bfloat16", ("eager",))


def scratch_repo(where: Path, shape: Shape) -> None:
    where.mkdir(parents=True)
    git(where, "init", "-q", "-b", "main")
    git(where, "config", "user.email", "scale@example.com")
    git(where, "config", "user.name", "scale")
    fields = {k: getattr(shape, k) for k in ("layers", "width", "batch", "device", "dtype")}
    (where / "bigmodel.py").write_text(MODEL.format(**fields))
    (where / "test_big.py").write_text(TEST.format(note="base", variants=list(shape.variants)))
    (where / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    git(where, "add", "-A")
    git(where, "commit", "-qm", "base")
    head = TEST.format(note="head: a comment changed", variants=list(shape.variants))
    (where / "test_big.py").write_text(head)
    git(where, "commit", "-qam", "head")


def session(repo: Path, mode: str, env: dict[str, str], log: Path) -> dict[str, Any]:
    """One perfguard session on the scratch repository; its output (every phase's progress
    line, with the seconds since the item began) goes to `log`, also when it fails."""
    out_json = repo / f"results-{mode}.json"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--perfguard",
        "--perfguard-budget=1",
        "--perfguard-repeats=3",
        "--perfguard-progress=yes",
        f"--perfguard-json={out_json}",
        f"--perfguard-report={repo / f'report-{mode}.md'}",
    ]
    cmd.append("--perfguard-ab=HEAD~1" if mode == "ab" else "--perfguard-compare=none")
    peak, wall, out = run_watched(cmd, repo, env)
    log.write_text(out)
    if not out_json.exists():
        raise SystemExit(f"{mode}: no results\n{out[-3000:]}")
    run = json.loads(out_json.read_text())
    timed = 0.0
    reported = call_ms = None
    for result in run["results"]:
        timed += sum(result.get("samples_ms") or ()) / 1000
        item_peak = (result.get("metrics") or {}).get("peak_memory_bytes")
        reported = max(reported or 0, item_peak or 0) or None
        call_ms = (result.get("metrics") or {}).get("latency_p50_ms") or call_ms
    for result in run.get("baseline_results") or ():
        timed += sum(result.get("samples_ms") or ()) / 1000
    notes = [n for r in run["results"] for n in ((r.get("details") or {}).get("notes") or ())]
    return {
        "peak_hwm_bytes": peak.hwm_bytes,
        "process_peaks_bytes": sorted(
            (v for v in peak.by_process.values() if v > 50e6), reverse=True
        ),
        "peak_rss_bytes": peak.rss_bytes,
        "wall_s": round(wall, 1),
        "timed_s": round(timed, 2),
        "call_ms": call_ms,
        "reported_peak_bytes": reported,
        "notes": notes,
        "status": [r["status"] for r in run["results"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="64M,256M,1G,2G")
    parser.add_argument("--modes", default="stored,ab")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "model-scale.json"
    )
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    threads = os.cpu_count() or 1
    rows: list[dict[str, Any]] = []
    shapes = (
        {"gpu-35pct": gpu_shape()}
        if args.device == "cuda"
        else {size: Shape(*SIZES[size]) for size in args.sizes.split(",")}
    )
    for size, shape in shapes.items():
        with tempfile.TemporaryDirectory(prefix="pg-scale-") as tmp:
            repo = Path(tmp) / "repo"
            scratch_repo(repo, shape)
            code = MODEL_ONLY.format(threads=threads)
            model_peak, model_wall, out = run_watched([sys.executable, "-c", code], repo, env)
            print(f"{size}: the model alone, {model_wall:.0f} s", flush=True)
            # on a GPU, the model's own peak is its allocator's, as perfguard reports it
            alone = int(out.split()[-1]) if args.device == "cuda" else model_peak.hwm_bytes
            row: dict[str, Any] = {
                "size": size,
                "weights_bytes": shape.weights_bytes,
                "model_peak_bytes": alone,
                "model_wall_s": round(model_wall, 1),
            }
            for mode in args.modes.split(","):
                log = args.out.with_name(f"{args.out.stem}-{size}-{mode}.log")
                found = session(repo, mode, env, log)
                print(f"{size}: {mode}, {found['wall_s']:.0f} s (its output: {log})", flush=True)
                found["ratio"] = round(found["peak_hwm_bytes"] / model_peak.hwm_bytes, 2)
                if found["reported_peak_bytes"]:
                    found["reported_ratio"] = round(found["reported_peak_bytes"] / alone, 2)
                row[mode] = found
            print(json.dumps(row), flush=True)
            rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
    }
    args.out.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    print_table(rows)


def print_table(rows: list[dict[str, Any]]) -> None:
    gb = 1e9
    print("| model | weights | model alone | stored | A/B | reported | stored wall (timed) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        stored, ab = r.get("stored", {}), r.get("ab", {})
        print(
            f"| {r['size']} | {r['weights_bytes'] / gb:.2f} GB"
            f" | {r['model_peak_bytes'] / gb:.2f} GB"
            f" | {stored.get('peak_hwm_bytes', 0) / gb:.2f} GB ({stored.get('ratio')}x)"
            f" | {ab.get('peak_hwm_bytes', 0) / gb:.2f} GB ({ab.get('ratio')}x)"
            f" | {(stored.get('reported_peak_bytes') or 0) / gb:.2f} GB"
            f" | {stored.get('wall_s')} s ({stored.get('timed_s')} s) |"
        )


if __name__ == "__main__":
    main()
