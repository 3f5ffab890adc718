"""Does the A/B worker that is not measuring take CPU from the one that is?

Run:  .venv/bin/python -m benchmarks.idle_worker [--runs 5]

In same-job A/B one worker samples a block while the other waits for the driver's next
command. A thread pool whose threads spin while waiting would take a core from the
measuring side. Each measurement runs in a fresh process, under three OpenMP wait
policies (unset, ACTIVE, PASSIVE):
- `idle`: the waiting side's pattern: half a second of matmuls, then two seconds blocked;
  its CPU use while blocked, in % of a core;
- `busy`: the measuring side's pattern: small matmuls with short host-side gaps; calls per
  second, and CPU use (a policy that sleeps at once slows the measured side itself).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

IDLE = """
import os, time, torch
x = torch.randn(256, 256)
cpu = lambda: sum(os.times()[:2])
t0 = time.time()
while time.time() - t0 < 0.5:
    x @ x
c0, w0 = cpu(), time.time()
time.sleep(2.0)
print(100 * (cpu() - c0) / (time.time() - w0))
"""
BUSY = """
import os, time, torch
x, w = torch.randn(64, 512), torch.randn(512, 512)
cpu = lambda: sum(os.times()[:2])
c0, w0 = cpu(), time.time()
n = 0
while time.time() - w0 < 2.0:
    x @ w
    n += 1
    time.sleep(0.0002)
seconds = time.time() - w0
print(n / seconds, 100 * (cpu() - c0) / seconds)
"""
POLICIES = ("", "ACTIVE", "PASSIVE")


def once(code: str, policy: str) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return [float(v) for v in out.stdout.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "idle-worker.json"
    )
    args = parser.parse_args()
    found: dict[str, dict[str, float]] = {}
    for policy in POLICIES:
        idle = [once(IDLE, policy)[0] for _ in range(args.runs)]
        busy = [once(BUSY, policy) for _ in range(args.runs)]
        found[policy or "unset"] = {
            "idle_cpu_pct": round(statistics.median(idle), 1),
            "busy_calls_per_s": round(statistics.median(b[0] for b in busy)),
            "busy_cpu_pct": round(statistics.median(b[1] for b in busy)),
        }
        print(f"OMP_WAIT_POLICY={policy or '(unset)'}: {found[policy or 'unset']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": args.runs, "medians": found}, indent=1) + "\n")


if __name__ == "__main__":
    main()
