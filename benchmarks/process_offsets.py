"""How far apart do two processes of identical code measure, and does building at once matter?

Run:  .venv/bin/python -m benchmarks.process_offsets [--trials 24] [--block 0.13]

Same-job A/B pairs blocks of two worker processes, which cancels what changes between blocks
but not a lasting difference between the two processes. This probe starts two fresh
processes per trial, lets them build the load study's two models (serially, or both at
once as the A/B driver now does), then alternates six pairs of blocks per model, in a random
order, as the driver does. Each model gives the change of B over A (the mean log ratio of
its pairs); on identical code every change is a process offset. Serial and concurrent trials
alternate, so a slow spell of the host hits both alike. Printed: per way of building, the
comparisons, how many moved by 3% and by 5% or more, and the largest.
"""

from __future__ import annotations

import argparse
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
from perfguard.measure.sampling import sample_block

PAIRS = 6


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
            _, kind, seconds = command
            model, inputs = models[kind]
            with torch.no_grad():
                for _ in range(2):  # re-warm, as a block does
                    model(*inputs)
                times = sample_block(
                    functools.partial(model, *inputs),
                    HostClock(),
                    min_samples=10,
                    max_samples=5000,
                    budget_ms=seconds * 1000.0,
                )
            conn.send(statistics.median(times))


def trial(concurrent: bool, rng: random.Random, block_s: float, source: str) -> dict[str, float]:
    """One pair of fresh processes: the change of B over A per model, in percent."""
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
    for kind in MODELS:
        ratios = []
        for _ in range(PAIRS):
            order = [("A", a), ("B", b)]
            rng.shuffle(order)
            medians = {}
            for name, side in order:
                side.send(("block", kind, block_s))
                medians[name] = side.recv()
            ratios.append(math.log(medians["B"] / medians["A"]))
        out[kind] = 100.0 * (math.exp(statistics.mean(ratios)) - 1.0)
    for side in (a, b):
        side.send("stop")
    for p in procs.values():
        p.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=24, help="trials of each way")
    parser.add_argument("--block", type=float, default=0.13, help="seconds a block samples")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    mp.set_start_method("spawn")
    rng = random.Random(args.seed)
    source = _study_models(0)  # identical code: the same models in both processes
    changes: dict[bool, list[float]] = {False: [], True: []}
    for i in range(args.trials * 2):
        concurrent = (i % 2 == 1) == (i // 2 % 2 == 0)  # serial, concurrent, concurrent, ...
        changes[concurrent] += trial(concurrent, rng, args.block, source).values()
    for concurrent, values in changes.items():
        moved = sorted((abs(v) for v in values), reverse=True)
        print(
            f"{'at once' if concurrent else 'serially'}: {len(moved)} comparisons, "
            f">=3%: {sum(v >= 3 for v in moved)}, >=5%: {sum(v >= 5 for v in moved)}, "
            f"largest: {', '.join(f'{v:.1f}%' for v in moved[:4])}"
        )


if __name__ == "__main__":
    main()
