"""Exact-signal study: is a committed graph break flagged every time, and identical code never?

Run:  .venv/bin/python benchmarks/exact_study.py [--runs 10] [--out FILE]

A scratch git repository holds a perf test of a small model under `eager` and
`compile-default`. Its base commit is measured once and saved as the baseline. Then, `--runs`
times each, `pytest --perfguard` measures (each run its own process) one of three heads:
- `graph-break`: `forward` gains a Python branch on a tensor's value (`.item()`), which splits
  the compiled graph;
- `identical`: a commit that changes only a comment;
- `one-op`: `forward` gains one operator (`x * 0.5`).
A run is flagged when one of its exact comparisons (graphs, graph breaks, recompiles, ATen
operators, FLOPs) is a `regression`; the study also records whether the break's reason and
the added operator's name are in the report.
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

MODEL = """
import torch
from torch import nn


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)

    def forward(self, x):
        y = torch.relu(self.a(x))
        # EDIT
        return self.b(y)
"""
TEST = """
import pytest
import torch
from mymodel import Small


@pytest.mark.perfguard(variants=["eager", "compile-default"])
def test_small(perfguard):
    torch.manual_seed(0)
    perfguard.run(Small().eval(), (torch.randn(16, 64),))
"""
EDITS = {
    "graph-break": "if y.sum().item() > -1e9:\n            y = y + 0",
    "identical": "# an unrelated comment",
    "one-op": "y = y * 0.5",
}
ARGS = ("--perfguard-device=cpu", "--perfguard-budget=0.3", "-p", "no:cacheprovider", "-q")
GIT = {
    "GIT_AUTHOR_NAME": "study",
    "GIT_AUTHOR_EMAIL": "study@localhost",
    "GIT_COMMITTER_NAME": "study",
    "GIT_COMMITTER_EMAIL": "study@localhost",
}


def sh(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=repo, capture_output=True, text=True, env={**os.environ, **GIT}, check=False
    )


def one(repo: Path, head: str, index: int) -> dict[str, Any]:
    sh(repo, "git", "checkout", "-q", "main")
    sh(repo, "git", "checkout", "-q", "-B", f"{head}-{index}")
    source = MODEL.replace("# EDIT", EDITS[head])
    if head == "identical":
        source += f"\n# run {index}\n"
    (repo / "mymodel.py").write_text(source)
    sh(repo, "git", "commit", "-q", "-am", f"{head} {index}")
    out = repo / "out.json"
    report = repo / "report.md"
    started = time.perf_counter()
    done = sh(
        repo,
        sys.executable,
        "-m",
        "pytest",
        "--perfguard",
        f"--perfguard-json={out}",
        f"--perfguard-report={report}",
        "--perfguard-fail-on=never",
        *ARGS,
    )
    seconds = time.perf_counter() - started
    doc = json.loads(out.read_text()) if out.exists() else {"comparisons": []}
    text = report.read_text() if report.exists() else ""
    exact = [
        c
        for c in doc["comparisons"]
        if c["metric"] in ("graphs", "graph_breaks", "recompiles", "aten_ops", "flops")
    ]
    flagged = [f"{c['variant']}:{c['metric']}" for c in exact if c["verdict"] == "regression"]
    return {
        "head": head,
        "run": index,
        "exit": done.returncode,
        "flagged": flagged,
        "gating_flags": [
            f"{c['variant']}:{c['metric']}"
            for c in exact
            if c["verdict"] == "regression" and c.get("gating", True)
        ],
        "reason_in_report": "new graph break: Unsupported Tensor.item()" in text,
        "op_named": "added aten::mul" in text,
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "exact-study.json"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfguard-exact-study-") as folder:
        repo = Path(folder)
        (repo / "mymodel.py").write_text(MODEL.replace("# EDIT", "# base"))
        (repo / "test_small.py").write_text(TEST)
        sh(repo, "git", "init", "-q", "-b", "main")
        sh(repo, "git", "add", "-A")
        sh(repo, "git", "commit", "-q", "-m", "base")
        base = sh(repo, sys.executable, "-m", "pytest", "--perfguard", "--perfguard-save", *ARGS)
        if base.returncode != 0:
            raise SystemExit(f"measuring the base failed:\n{base.stdout[-2000:]}")
        rows = []
        for index in range(args.runs):
            for head in EDITS:
                row = one(repo, head, index)
                rows.append(row)
                print(
                    f"{head:<12} run {index + 1}: flagged {row['flagged'] or 'nothing'} "
                    f"({row['seconds']:.0f} s)",
                    flush=True,
                )
    summary: dict[str, Any] = {"runs": args.runs, "rows": rows}
    for head in EDITS:
        mine = [r for r in rows if r["head"] == head]
        summary[head] = {
            "flagged": sum(bool(r["flagged"]) for r in mine),
            "gating": sum(bool(r["gating_flags"]) for r in mine),
            "reason_in_report": sum(r["reason_in_report"] for r in mine),
            "op_named": sum(r["op_named"] for r in mine),
        }
        print(
            f"{head}: flagged in {summary[head]['flagged']}/{len(mine)} "
            f"(gating {summary[head]['gating']}), reason in report "
            f"{summary[head]['reason_in_report']}, op named {summary[head]['op_named']}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
