"""Bisect study: does `perfguard bisect` name the commit that made a model 20% slower?

Run:  .venv/bin/python benchmarks/bisect_study.py [--tries 10] [--commits 16] [--extra 20]
          [--out benchmarks/data/bisect-study.json]

Each try builds a scratch git repository: a good commit with a perf test of an MLP of
`DEPTH` identical blocks, then `--commits` commits of main, one of them (at a random place)
adding `--extra` percent more blocks (real compute of the same kind), the others touching
only a text file. It then runs `perfguard bisect GOOD main` there, as a user would, and
records the culprit it printed, how many paired measurements it made and how long it took.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.gitrepo import git

DEPTH = 20
MODELS = """
import torch
from torch import nn

DEPTH = {depth}

def mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    return nn.Sequential(*layers).eval(), (torch.randn(64, 256),)
"""
TESTS = """
import pytest
from mymodels import mlp

@pytest.mark.perfguard(variants=["eager"])
def test_mlp(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)
"""
PYTEST_ARGS = ("--perfguard-device=cpu",)


def scratch(repo: Path, commits: int, culprit: int, extra_pct: int) -> list[str]:
    """good, then `commits` commits; the one at index `culprit` (1-based) adds the compute."""
    repo.mkdir()
    (repo / "mymodels.py").write_text(MODELS.format(depth=DEPTH))
    (repo / "test_models.py").write_text(TESTS)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "good")
    shas = [git(repo, "rev-parse", "HEAD")]
    for i in range(1, commits + 1):
        if i == culprit:
            depth = round(DEPTH * (1 + extra_pct / 100))
            (repo / "mymodels.py").write_text(MODELS.format(depth=depth))
        (repo / "notes.txt").write_text(f"commit {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def one_try(index: int, commits: int, extra_pct: int, rng: random.Random) -> dict[str, Any]:
    culprit = rng.randint(1, commits)
    with tempfile.TemporaryDirectory(prefix="perfguard-bisect-study-") as folder:
        repo = Path(folder) / "repo"
        shas = scratch(repo, commits, culprit, extra_pct)
        out = Path(folder) / "bisect.json"
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "perfguard.cli",
                "bisect",
                shas[0],
                "main",
                "--json",
                str(out),
                "--",
                *PYTEST_ARGS,
            ],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
        doc = json.loads(out.read_text()) if out.exists() else {}
    found = doc.get("culprit")
    row = {
        "try": index,
        "culprit_at": culprit,
        "culprit": shas[culprit],
        "found": found,
        "right": found == shas[culprit],
        "measurements": doc.get("measurements"),
        "commits_measured": len(
            {c for st in doc.get("steps", []) for c in (st["base"], st["head"])}
        ),
        "seconds": round(seconds, 1),
        "exit": done.returncode,
        "reason": doc.get("reason") or done.stderr.strip().splitlines()[-1:],
    }
    print(
        f"try {index}: culprit at {culprit}/{commits}, "
        f"{'found' if row['right'] else 'MISSED'} with {row['measurements']} measurements "
        f"in {seconds:.0f} s",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--commits", type=int, default=16)
    parser.add_argument("--extra", type=int, default=20, help="percent more compute (20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "bisect-study.json"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = [one_try(i + 1, args.commits, args.extra, rng) for i in range(args.tries)]
    right = sum(r["right"] for r in rows)
    measured = [r["measurements"] for r in rows if r["measurements"] is not None]
    summary = {
        "tries": args.tries,
        "commits": args.commits,
        "extra_pct": args.extra,
        "right": right,
        "measurements": {
            "min": min(measured, default=0),
            "max": max(measured, default=0),
            "mean": sum(measured) / max(len(measured), 1),
        },
        "seconds_mean": sum(r["seconds"] for r in rows) / len(rows),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"culprit named in {right}/{args.tries} tries; paired measurements per bisect "
        f"{summary['measurements']['min']}-{summary['measurements']['max']} "
        f"(mean {summary['measurements']['mean']:.1f}); {summary['seconds_mean']:.0f} s per bisect"
    )


if __name__ == "__main__":
    main()
