"""Should a compiled training step compile the optimizer's step too? Measured, not assumed.

perfguard's `compile-*` variants of `perfguard.train_step` compile the module (forward and
backward) and leave the optimizer's step eager. This script times both choices on the same
models: the module compiled, and the module plus `torch.compile(optimizer.step)` (what
PyTorch's tutorial on compiling optimizers shows), with each choice's first step (its
compile) and its steady step time (median of `--steps` steps, `--rounds` rounds
interleaved).

Run:  .venv/bin/python benchmarks/train_step_compile.py [--device cpu] [--rounds 5]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def models(device: torch.device) -> dict[str, tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU())
    mlp.append(nn.Linear(512, 64))
    many = nn.Sequential(*[nn.Linear(64, 64) for _ in range(24)])  # many small parameters
    return {
        "mlp 256-512-512-64, batch 32": (mlp.to(device), torch.randn(32, 256, device=device)),
        "24 x Linear(64, 64), batch 32": (many.to(device), torch.randn(32, 64, device=device)),
    }


def stepper(
    model: nn.Module, x: torch.Tensor, compile_optimizer: bool
) -> tuple[Callable[[], Any], Callable[[], tuple[float, float]]]:
    """One choice's step, and how to take its first step: (seconds of the module's first
    forward and backward, which compile them; seconds of the optimizer's first step, which
    compiles it when asked)."""
    model = copy.deepcopy(model)  # each choice its own weights, optimizer and compiled code
    compiled = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    opt_step = torch.compile(optimizer.step) if compile_optimizer else optimizer.step

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        compiled(x).square().mean().backward()
        opt_step()

    def first() -> tuple[float, float]:
        start = time.perf_counter()
        compiled(x).square().mean().backward()
        middle = time.perf_counter()
        opt_step()
        return middle - start, time.perf_counter() - middle

    return step, first


def timed(step: Callable[[], Any], device: torch.device, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    device = torch.device(args.device)
    print(
        "| model | optimizer step | module's first forward and backward | optimizer's first "
        "step | step p50 (median of rounds) |"
    )
    print("| --- | --- | ---: | ---: | ---: |")
    for name, (model, x) in models(device).items():
        torch._dynamo.reset()
        first: dict[bool, tuple[float, float]] = {}
        medians: dict[bool, list[float]] = {False: [], True: []}
        steps = {}
        for choice in (False, True):
            steps[choice], take_first = stepper(model, x, choice)
            first[choice] = take_first()
            timed(steps[choice], device, 10)  # warm
        for _ in range(args.rounds):  # interleaved, so drift of the machine hits both alike
            for choice in (False, True):
                medians[choice].append(statistics.median(timed(steps[choice], device, args.steps)))
        for choice in (False, True):
            p50 = statistics.median(medians[choice])
            label = "compiled too" if choice else "eager (perfguard)"
            module_s, optimizer_s = first[choice]
            print(f"| {name} | {label} | {module_s:.1f} s | {optimizer_s:.2f} s | {p50:.3f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
