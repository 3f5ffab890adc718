"""Memory that must not grow: is a leaking model flagged every time, a clean one never?

Each run measures, in a process of its own (as CI would), one small model that keeps every
call's output in a list and the same model that keeps nothing, under eager and as a training
step, and reads `memory_growth_bytes_per_call` and the leak note from the results.

Run:  .venv/bin/python benchmarks/leak_study.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

WORKER = r"""
import json, sys, torch
from torch import nn
from perfguard import Job, MeasureSettings, SamplingSettings, TrainStep, measure_model

class Model(nn.Module):
    def __init__(self, leak):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        self.leak, self.kept = leak, []
    def forward(self, x):
        y = self.net(x)
        if self.leak:
            self.kept.append(y.detach())
        return y

settings = MeasureSettings(sampling=SamplingSettings(budget_s=0.2, repeats=3), device="cpu")
x = torch.randn(16, 64)
step = TrainStep(lambda out: out.square().mean(), lambda p: torch.optim.AdamW(p))
out = {}
for leak in (True, False):
    for kind, training in (("forward", None), ("train", step)):
        r = measure_model(Job.of(Model(leak), (x,), "eager", settings, work=training))
        out[f"{'leaking' if leak else 'clean'} {kind}"] = {
            "growth": r.counters.memory_growth_bytes_per_call,
            "flagged": any("a leak" in n for n in r.details.notes),
        }
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    tally: dict[str, list[dict[str, object]]] = {}
    for i in range(args.runs):
        done = subprocess.run(
            [sys.executable, "-c", WORKER], check=True, capture_output=True, text=True
        )
        for name, row in json.loads(done.stdout.strip().splitlines()[-1]).items():
            tally.setdefault(name, []).append(row)
        print(f"run {i + 1}/{args.runs} done", file=sys.stderr)
    print("| model | runs | flagged as a leak | bytes per call (each run) |")
    print("| --- | ---: | ---: | --- |")
    for name, rows in tally.items():
        flagged = sum(bool(r["flagged"]) for r in rows)
        sizes = sorted({str(r["growth"]) for r in rows})
        print(f"| {name} | {len(rows)} | {flagged} | {', '.join(sizes)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
