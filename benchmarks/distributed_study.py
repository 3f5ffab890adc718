"""Distributed steps in same-job A/B: identical code, a straggler, a doubled all-reduce.

Run:  .venv/bin/python -m benchmarks.distributed_study [--comparisons 10]
          [--out benchmarks/data/distributed-study.json]

A scratch repository holds one perf test: a DDP training step at world size 2 on gloo (the
CPU's backend), with an explicit all-reduce of a buffer beside the gradients' (a model's
gradient bucket of a known size). Sized on this project's 2-core VM so that a step is about
28 ms: some 14 ms of compute a rank and 8 ms in the explicit all-reduce (8 MB; smaller
buffers cost gloo's latency, about 2 ms, whatever their size, so doubling them moves
nothing). Three kinds of head, each committed on top of the base and run as a pull request's
check runs it (`pytest --perfguard --perfguard-ab=HEAD~1`, fresh processes, confirmation
on), `--comparisons` times each, in turn:

- `identical`: a comment changed: must be flagged in none;
- `straggler`: rank 1 alone does 20% more compute a step (36 matmuls where rank 0 does 30),
  so every step waits for it: must be caught as a regression;
- `payload`: the explicit all-reduce's buffer doubled: must be caught, and the regression's
  why must head with the collectives' time.

Each run's verdict of the step's p50, its change, the collectives' share on both sides and
the why's first row are kept; the summary gives k of n per kind with Wilson's 95% interval.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.calibrate_check import wilson
from benchmarks.fault_harness import committed_repo
from tests.gitrepo import git

HERE = Path(__file__).resolve().parent

TEST = """
import torch
import torch.distributed as dist
import pytest
from torch.nn.parallel import DistributedDataParallel as DDP

MATMULS = {0: 30, 1: 30}  # each rank's compute a step, in matmuls of WIDTH x WIDTH
WIDTH = 512
BUFFER = 2097152  # floats all-reduced beside the gradients, each step (8 MB)


def build(rank, world_size):
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(WIDTH, WIDTH))
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x = torch.randn(64, WIDTH)
    weights = torch.randn(WIDTH, WIDTH) / WIDTH**0.5
    buffer = torch.ones(BUFFER)

    def step():
        h = x
        for _ in range(MATMULS[rank]):
            h = torch.tanh(h @ weights)
        opt.zero_grad()
        loss = model(h).pow(2).mean()
        loss.backward()
        opt.step()
        dist.all_reduce(buffer)
        buffer.fill_(1.0)
        return loss.detach()

    return step


@pytest.mark.perfguard(variants=["eager"])
def test_ddp_step(perfguard):
    perfguard.distributed(build, world_size=2)
"""

HEADS = {
    "identical": ("# a comment\n", ""),
    "straggler": ("MATMULS = {0: 30, 1: 30}", "MATMULS = {0: 30, 1: 36}"),
    "payload": ("BUFFER = 2097152 ", "BUFFER = 4194304 "),
}


def scratch(root: Path, matmuls: int) -> Path:
    files = {
        "tests/test_ddp.py": _sized(TEST, matmuls),
        "pytest.ini": "[pytest]\n",
        ".gitignore": "reports/\n__pycache__/\n",
    }
    return committed_repo(root / "repo", files)


def _sized(text: str, matmuls: int) -> str:
    """`text` with each rank's compute `matmuls` matmuls (30 as written)."""
    return text.replace("{0: 30, 1: 30}", f"{{0: {matmuls}, 1: {matmuls}}}").replace(
        "{0: 30, 1: 36}", f"{{0: {matmuls}, 1: {round(matmuls * 1.2)}}}"
    )


def head(repo: Path, kind: str, matmuls: int) -> None:
    """Check out a branch `kind` from the base, with its change committed."""
    git(repo, "checkout", "-q", "main")
    git(repo, "checkout", "-q", "-B", kind)
    path = repo / "tests" / "test_ddp.py"
    old, new = (_sized(part, matmuls) for part in HEADS[kind])
    text = path.read_text()
    path.write_text(text + old if not new else text.replace(old, new))
    git(repo, "commit", "-q", "-am", kind)


def pr_run(repo: Path, kind: str, index: int) -> dict[str, Any]:
    results = repo.parent / f"{kind}-{index}.json"
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests",
        "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-device=cpu",
        "--perfguard-record=no", "--perfguard-fail-on=never",
        f"--perfguard-json={results}", f"--perfguard-report={repo.parent / 'pr.md'}",
    ]  # fmt: skip
    started = time.monotonic()
    subprocess.run(cmd, cwd=repo, check=False, stdout=subprocess.DEVNULL)
    run = json.loads(results.read_text())
    p50: dict[str, Any] = next(
        (c for c in run["comparisons"] if c["metric"] == "latency_p50_ms"), {}
    )
    shares = [
        sum(r["details"].get("collective_share") or [0.0]) / 2
        for r in (*run.get("baseline_results", []), *run["results"])
    ]
    return {
        "kind": kind,
        "seconds": round(time.monotonic() - started, 1),
        "verdict": p50.get("verdict"),
        "change_pct": p50.get("change_pct"),
        "why_first": (p50.get("why") or [[None]])[0][0],
        "collective_share_base_head": [round(s, 3) for s in shares],
        "status": [r["status"] for r in run["results"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comparisons", type=int, default=10)
    parser.add_argument("--out", type=Path, default=HERE / "data" / "distributed-study.json")
    parser.add_argument("--kinds", default=",".join(HEADS), help="which heads, in turn")
    parser.add_argument(
        "--matmuls", type=int, default=30, help="each rank's compute a step (the straggler's +20%%)"
    )
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    runs = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="perfguard-distributed-study-") as tmp:
        repo = scratch(Path(tmp), args.matmuls)
        for i in range(args.comparisons):
            for kind in kinds:
                head(repo, kind, args.matmuls)
                runs.append(pr_run(repo, kind, i))
                loads.append(os.getloadavg()[0])
                last = runs[-1]
                print(
                    f"{kind} {i + 1}/{args.comparisons}: {last['verdict']} "
                    f"{last['change_pct']} why={last['why_first']} ({last['seconds']} s)",
                    flush=True,
                )
    summary: dict[str, Any] = {"load_avg_1min": [min(loads), max(loads)], "matmuls": args.matmuls}
    for kind in kinds:
        mine = [r for r in runs if r["kind"] == kind]
        if kind == "identical":
            k = sum(r["verdict"] in ("regression", "improvement") for r in mine)
        else:
            k = sum(r["verdict"] == "regression" for r in mine)
        summary[kind] = {"flagged" if kind == "identical" else "caught": [k, len(mine)]}
        summary[kind]["ci95"] = [round(x, 3) for x in wilson(k, len(mine))]
        changes = sorted(r["change_pct"] for r in mine if r["change_pct"] is not None)
        summary[kind]["median_change_pct"] = changes[len(changes) // 2] if changes else None
        summary[kind]["why_collectives_first"] = sum(
            bool(r["why_first"] and r["why_first"].startswith("collectives")) for r in mine
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
