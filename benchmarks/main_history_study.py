"""Main's history study: each commit of a synthetic main measured through main's real path,
paired (beside its parent, the default) and stored (`--perfguard-save-unpaired`), then
`perfguard history` over each.

Run:  .venv/bin/python -m benchmarks.main_history_study run [--runs 3] [--commits 30]
          [--load bursty] [--keep DIR] [--out benchmarks/data/main-history-study.json]
      .venv/bin/python -m benchmarks.main_history_study analyze [--keep DIR] [--out ...]

Each run builds a scratch repository: a root commit with a perf test of an MLP of `DEPTH`
identical blocks, then `--commits` commits of main. Three of them change the compute by
+10%, +25% and -50% (real work of the same kind: blocks added or removed), at the early,
middle and late positions `STEPS` (which step goes where rotates from run to run); the
others touch only a text file. Every commit, root first, is checked out and measured as
main's job measures it, `pytest --perfguard --perfguard-save`, once paired (its default:
beside HEAD's first parent, same-job A/B) and once stored (`--perfguard-save-unpaired`:
HEAD alone, against the stored baseline), one after the other so both see the same host,
under the load generator (`benchmarks.detection.load`). Then `perfguard history` reads each
path's baselines.

What is scored, per path: each step found at its commit (a p50 change point whose commit is
the step's, in its direction), false change points (any other p50 change point), main's job
exit codes (1: it flagged a regression; on a no-op commit that is a false alarm), and the
wall time of each commit's job. `--keep` keeps every run's repository and baseline folders,
so `analyze` can read them again (after a change to the history code) without measuring.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bisect_study import MODELS, TESTS  # the same MLP and its perf test
from tests.gitrepo import git

DEPTH = 40
STEPS = (5, 15, 25)  # early, middle and late commits of main (1-based; 0 is the root)
CHANGES = (10, 25, -50)  # percent more compute; run r puts CHANGES rotated by r at STEPS
PATHS = ("paired", "stored")
PYTEST_ARGS = ("--perfguard", "--perfguard-save", "--perfguard-device=cpu", "-q", "-p", "no:xdist")


def plan(run: int, commits: int) -> dict[int, int]:
    """commit index -> its change in percent, for run `run`."""
    shift = run % len(CHANGES)
    changes = CHANGES[shift:] + CHANGES[:shift]
    return {at: change for at, change in zip(STEPS, changes, strict=True) if at <= commits}


def scratch(repo: Path, commits: int, steps: dict[int, int]) -> tuple[list[str], list[int]]:
    """The repository: the root, then `commits` commits; (their shas, their depths)."""
    repo.mkdir(parents=True)
    (repo / ".gitignore").write_text("reports/\n.pytest_cache/\n__pycache__/\n")
    (repo / "mymodels.py").write_text(MODELS.format(depth=DEPTH))
    (repo / "test_models.py").write_text(TESTS)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "root")
    shas, depths, depth = [git(repo, "rev-parse", "HEAD")], [DEPTH], DEPTH
    for i in range(1, commits + 1):
        if i in steps:
            depth = round(depth * (1 + steps[i] / 100))
            (repo / "mymodels.py").write_text(MODELS.format(depth=depth))
        (repo / "notes.txt").write_text(f"commit {i}\n")
        git(repo, "add", "-A")
        note = f" ({steps[i]:+d}%)" if i in steps else ""
        git(repo, "commit", "-q", "-m", f"commit {i}{note}")
        shas.append(git(repo, "rev-parse", "HEAD"))
        depths.append(depth)
    return shas, depths


def measure(repo: Path, baselines: Path, path: str, report: Path) -> dict[str, Any]:
    """Main's job on the checked-out commit; its exit code, time and p50 verdict."""
    extra = ["--perfguard-save-unpaired"] if path == "stored" else []
    results = report.with_suffix(".json")
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *PYTEST_ARGS,
            *extra,
            f"--perfguard-baseline-dir={baselines}",
            f"--perfguard-report={report}",
            f"--perfguard-json={results}",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    report.with_suffix(".log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    doc = json.loads(results.read_text()) if results.exists() else {}
    p50 = [
        c
        for c in doc.get("comparisons", [])
        if c["metric"] == "latency_p50_ms" and c.get("scope", "metric") == "metric"
    ]
    row = {
        "exit": done.returncode,
        "seconds": round(seconds, 1),
        "mode": (doc.get("baseline") or {}).get("mode"),
        "verdict": p50[0]["verdict"] if p50 else None,
        "change_pct": p50[0]["change_pct"] if p50 else None,
    }
    if done.returncode not in (0, 1) or not doc:
        row["tail"] = done.stdout.strip().splitlines()[-5:] + done.stderr.strip().splitlines()[-3:]
    return row


def one_run(index: int, commits: int, keep: Path) -> dict[str, Any]:
    folder = keep / f"run{index}"
    repo = folder / "repo"
    steps = plan(index, commits)
    shas, depths = scratch(repo, commits, steps)
    rows = []
    for i, sha in enumerate(shas):
        git(repo, "checkout", "-q", sha)
        row: dict[str, Any] = {"commit": i, "sha": sha, "depth": depths[i], "step": steps.get(i)}
        for path in PATHS:
            report = folder / "reports" / f"{path}-{i}.md"
            report.parent.mkdir(parents=True, exist_ok=True)
            row[path] = measure(repo, folder / path, path, report)
        print(
            f"run {index} commit {i:2d}{'' if i not in steps else f' ({steps[i]:+d}%)':>8}: "
            + "  ".join(
                f"{p} exit {row[p]['exit']} {row[p]['verdict']} "
                f"{_pct(row[p]['change_pct'])} {row[p]['seconds']:.0f}s"
                for p in PATHS
            ),
            flush=True,
        )
        rows.append(row)
    git(repo, "checkout", "-q", "main")
    return {"run": index, "steps": {str(k): v for k, v in steps.items()}, "commits": rows}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def history(repo: Path, baselines: Path) -> dict[str, Any]:
    out = baselines.parent / f"history-{baselines.name}.json"
    done = subprocess.run(
        [sys.executable, "-m", "perfguard.cli", "history", f"--dir={baselines}", f"--json={out}"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"perfguard history failed in {repo}: {done.stderr.strip()}")
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def score(run: dict[str, Any], keep: Path) -> dict[str, Any]:
    """Per path: the steps found at their commit, the false change points, main's flags."""
    folder = keep / f"run{run['run']}"
    shas = [row["sha"] for row in run["commits"]]
    steps = {int(k): v for k, v in run["steps"].items()}
    out: dict[str, Any] = {}
    for path in PATHS:
        doc = history(folder / "repo", folder / path)
        found = [c for c in doc["change_points"] if c["metric"] == "latency_p50_ms"]
        hit = {}
        for at, change in steps.items():
            hit[str(at)] = any(
                c["commit"] == shas[at] and (c["change_pct"] > 0) == (change > 0) for c in found
            )
        false = [
            {"commit": shas.index(c["commit"]), "change_pct": round(c["change_pct"], 1)}
            for c in found
            if not any(c["commit"] == shas[at] for at in steps)
        ]
        flagged_noop = [
            row["commit"]
            for row in run["commits"]
            if row["step"] is None and row[path]["exit"] == 1
        ]
        seconds = [row[path]["seconds"] for row in run["commits"]]
        out[path] = {
            "found": hit,
            "false": false,
            "flagged_noop": flagged_noop,
            "errors": [row["commit"] for row in run["commits"] if row[path]["exit"] not in (0, 1)],
            "step_verdicts": {str(at): run["commits"][at][path]["verdict"] for at in steps},
            "seconds_mean": round(sum(seconds) / len(seconds), 1),
            "search_notes": doc.get("notes", []),
        }
    return out


def analyze(keep: Path, out: Path) -> None:
    doc = json.loads(out.read_text())
    for run in doc["runs"]:
        run["score"] = score(run, keep)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(
        "| run | path | steps found at their commit | false change points | "
        "no-op commits main's job flagged | s per commit |"
    )
    print("| ---: | --- | --- | --- | --- | ---: |")
    for run in doc["runs"]:
        for path in PATHS:
            s = run["score"][path]
            found = ", ".join(
                f"{run['steps'][at]:+d}% at {at}: {'yes' if ok else 'no'}"
                for at, ok in s["found"].items()
            )
            false = ", ".join(f"{f['change_pct']:+.1f}% at {f['commit']}" for f in s["false"])
            flagged = ", ".join(str(c) for c in s["flagged_noop"])
            cells = [str(run["run"]), path, found, false or "none", flagged or "none"]
            print(f"| {' | '.join(cells)} | {s['seconds_mean']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    default_out = Path(__file__).parent / "data" / "main-history-study.json"
    for name in ("run", "analyze"):
        p = sub.add_parser(name)
        p.add_argument("--keep", type=Path, default=Path("/tmp/perfguard-main-history-study"))
        p.add_argument("--out", type=Path, default=default_out)
    run_p = sub.choices["run"]
    run_p.add_argument("--runs", type=int, default=3)
    run_p.add_argument("--commits", type=int, default=30)
    run_p.add_argument("--load", default="bursty", help="the load generator's pattern (bursty)")
    args = parser.parse_args()
    if args.command == "run":
        from benchmarks.detection import load

        if args.keep.exists() and any(args.keep.iterdir()):
            raise SystemExit(f"{args.keep} is not empty: give another --keep")
        args.keep.mkdir(parents=True, exist_ok=True)
        runs = []
        with load(args.load):
            for r in range(args.runs):
                runs.append(one_run(r + 1, args.commits, args.keep))
                doc = {
                    "machine": os.uname().nodename,
                    "cpus": os.cpu_count(),
                    "load": args.load,
                    "commits": args.commits,
                    "depth": DEPTH,
                    "runs": runs,
                }
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(doc, indent=1) + "\n")
    analyze(args.keep, args.out)


if __name__ == "__main__":
    main()
