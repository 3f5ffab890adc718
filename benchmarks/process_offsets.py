"""How far apart do two processes of identical code measure, and what changes it?

Run:  .venv/bin/python -m benchmarks.process_offsets [--trials 24] [--block 0.13]
          [--compare build|pin]

Same-job A/B pairs blocks of two worker processes, which cancels what changes between blocks
but not a lasting difference between the two processes. This probe starts two fresh
processes per trial, lets them build the load study's two models, then alternates six pairs
of blocks per model, in a random order, as the driver does. Each model gives the change of B
over A (the mean log ratio of its pairs); on identical code every change is a process
offset. Two ways alternate trial by trial, so a slow spell of the host hits both alike:

- `--compare build`: the two processes build serially, or both at once (as the driver does);
- `--compare pin`: both build at once; each block is timed from whatever CPU the scheduler
  left the thread on, or from the lowest allowed CPU in both processes (as the driver does,
  `perfguard.measure.placement.on_one_cpu`).

Printed: per way, the comparisons, how many moved by 3% and by 5% or more, the largest, and
in how many pairs the two processes timed their blocks on the same CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import math
import multiprocessing as mp
import random
import statistics
from multiprocessing.connection import Connection
from typing import Any

from benchmarks.detection import MODELS, _study_models
from perfguard.measure.clock import HostClock
from perfguard.measure.placement import on_one_cpu
from perfguard.measure.sampling import sample_block

PAIRS = 6


def _cpu_now() -> int:
    """The CPU the calling thread is on (Linux), or -1."""
    try:
        with open("/proc/thread-self/stat") as stat:
            return int(stat.read().rpartition(")")[2].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def _child(conn: Connection, source: str) -> None:
    import torch

    space: dict[str, Any] = {}
    exec(source, space)  # the load study's models, as its scratch repository holds them
    models: dict[str, tuple[Any, tuple[Any, ...]]] = {}
    while True:
        command = conn.recv()
        if command == "build":
            for kind in MODELS:
                model, inputs = space["build"](kind)
                with torch.no_grad():
                    torch.use_deterministic_algorithms(False)  # as perfguard's torch_state
                    copy.deepcopy(model).double()(*(t.double() for t in inputs))
                    for _ in range(3):
                        model(*inputs)
                models[kind] = (model, inputs)
            conn.send("built")
        elif command == "stop":
            return
        else:
            _, kind, seconds, pin = command
            model, inputs = models[kind]
            place = on_one_cpu() if pin else contextlib.nullcontext()
            with torch.no_grad(), place:
                for _ in range(2):  # re-warm, as a block does
                    model(*inputs)
                times = sample_block(
                    functools.partial(model, *inputs),
                    HostClock(),
                    min_samples=10,
                    max_samples=5000,
                    budget_ms=seconds * 1000.0,
                )
                cpu = _cpu_now()
            conn.send((statistics.median(times), cpu))


def trial(
    concurrent: bool, pin: bool, rng: random.Random, block_s: float, source: str
) -> tuple[dict[str, float], int]:
    """One pair of fresh processes: the change of B over A per model, in percent, and in how
    many pairs both timed their block on the same CPU."""
    links = {name: mp.Pipe() for name in "AB"}
    procs = {
        name: mp.Process(target=_child, args=(child, source)) for name, (_, child) in links.items()
    }
    for p in procs.values():
        p.start()
    a, b = links["A"][0], links["B"][0]
    if concurrent:
        a.send("build")
        b.send("build")
        a.recv()
        b.recv()
    else:
        for side in (a, b):
            side.send("build")
            side.recv()
    out = {}
    same_cpu = 0
    for kind in MODELS:
        ratios = []
        for _ in range(PAIRS):
            order = [("A", a), ("B", b)]
            rng.shuffle(order)
            medians, cpus = {}, {}
            for name, side in order:
                side.send(("block", kind, block_s, pin))
                medians[name], cpus[name] = side.recv()
            ratios.append(math.log(medians["B"] / medians["A"]))
            same_cpu += cpus["A"] == cpus["B"]
        out[kind] = 100.0 * (math.exp(statistics.mean(ratios)) - 1.0)
    for side in (a, b):
        side.send("stop")
    for p in procs.values():
        p.join()
    return out, same_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=24, help="trials of each way")
    parser.add_argument("--block", type=float, default=0.13, help="seconds a block samples")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--compare",
        choices=("build", "pin"),
        default="build",
        help="build: serially or at once; pin: blocks timed on any CPU or on one shared CPU",
    )
    args = parser.parse_args()
    mp.set_start_method("spawn")
    rng = random.Random(args.seed)
    source = _study_models(0)  # identical code: the same models in both processes
    names = {
        "build": {False: "serially", True: "at once"},
        "pin": {False: "any CPU", True: "one CPU"},
    }[args.compare]
    changes: dict[bool, list[float]] = {False: [], True: []}
    same: dict[bool, list[int]] = {False: [], True: []}
    for i in range(args.trials * 2):
        way = (i % 2 == 1) == (i // 2 % 2 == 0)  # A, B, B, A, A, B, ...
        concurrent = way or args.compare == "pin"
        pin = way and args.compare == "pin"
        found, same_cpu = trial(concurrent, pin, rng, args.block, source)
        changes[way] += found.values()
        same[way].append(same_cpu)
        print(
            f"trial {i + 1}: {names[way]}: " + ", ".join(f"{k} {v:+.2f}%" for k, v in found.items())
        )
    for way, values in changes.items():
        moved = sorted((abs(v) for v in values), reverse=True)
        print(
            f"{names[way]}: {len(moved)} comparisons, "
            f">=3%: {sum(v >= 3 for v in moved)}, >=5%: {sum(v >= 5 for v in moved)}, "
            f"largest: {', '.join(f'{v:.1f}%' for v in moved[:4])}; pairs timed on the same "
            f"CPU: {sum(same[way])} of {PAIRS * len(MODELS) * len(same[way])}"
        )


if __name__ == "__main__":
    main()
