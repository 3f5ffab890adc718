"""How far perfguard's median is from torch.utils.benchmark.Timer's, and what the loop costs.

Run:  .venv/bin/python benchmarks/timer_accuracy.py [--rounds 5] [--device cpu|cuda]

For each workload, in one process, the two timers take turns (perfguard, Timer, perfguard,
...) for `--rounds` rounds, so slow drift of the machine hits both alike; the table gives
the median over rounds of each one's median and their difference. On CUDA it adds
triton.testing.do_bench. The last rows are the per-sample overhead of perfguard's sampling
loop: timing an empty call with perfguard's host clock and with CUDA events.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.benchmark as tbench

from perfguard.environment import cpu_model
from perfguard.examples import SmallCNN, SmallEncoder, SmallMLP, example_inputs
from perfguard.measure.clock import Clock, CudaEventClock, HostClock
from perfguard.measure.sampling import SamplingSettings, sample

SETTINGS = SamplingSettings(budget_s=1.0, repeats=5)


def workloads(device: torch.device) -> dict[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {}
    for name, model in (("mlp", SmallMLP()), ("cnn", SmallCNN()), ("encoder", SmallEncoder())):
        m = model.eval().to(device)
        x = tuple(t.to(device) for t in example_inputs(model))

        def call(m: torch.nn.Module = m, x: tuple[torch.Tensor, ...] = x) -> Any:
            with torch.inference_mode():
                return m(*x)

        out[name] = call
    a = torch.randn(512, 512, device=device)
    out["matmul-512"] = lambda: a @ a
    return out


def perfguard_median(call: Callable[[], Any], clock: Clock) -> float:
    return statistics.median(sample(call, clock, SETTINGS).samples_ms)


def timer_median(call: Callable[[], Any]) -> float:
    timer = tbench.Timer(stmt="call()", globals={"call": call}, num_threads=torch.get_num_threads())
    return float(timer.blocked_autorange(min_run_time=1.0).median * 1e3)


def do_bench_median(call: Callable[[], Any]) -> float | None:
    try:
        from triton.testing import do_bench
    except ImportError:
        return None
    return float(do_bench(call, return_mode="median"))


def overhead_ns(clock: Clock, n: int = 20000) -> float:
    """Per-sample cost of perfguard's loop around an empty call, minus the bare clock read."""

    def empty() -> None:
        return None

    start = time.perf_counter_ns()
    for _ in range(n):
        clock.time_call(empty)
    looped = (time.perf_counter_ns() - start) / n
    start = time.perf_counter_ns()
    for _ in range(n):
        time.perf_counter_ns()
        empty()
        time.perf_counter_ns()
    bare = (time.perf_counter_ns() - start) / n
    return looped - bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    clock: Clock = CudaEventClock(device) if device.type == "cuda" else HostClock()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    print(
        f"# timer accuracy on {where} ({device.type}), torch {torch.__version__}, "
        f"python {platform.python_version()}, {torch.get_num_threads()} threads, "
        f"{args.rounds} rounds\n"
    )
    print("| workload | perfguard median (ms) | Timer median (ms) | difference | do_bench (ms) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, call in workloads(device).items():
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(args.rounds):
            ours.append(perfguard_median(call, clock))
            theirs.append(timer_median(call))
        a, b = statistics.median(ours), statistics.median(theirs)
        bench = do_bench_median(call) if device.type == "cuda" else None
        bench_text = "n/a" if bench is None else f"{bench:.4f}"
        print(f"| {name} | {a:.4f} | {b:.4f} | {100 * (a - b) / b:+.1f}% | {bench_text} |")
    print(f"\nperfguard loop overhead per sample ({clock.name}): {overhead_ns(clock):.0f} ns")
    if device.type == "cuda":
        print(f"host clock overhead per sample: {overhead_ns(HostClock()):.0f} ns")


if __name__ == "__main__":
    main()
