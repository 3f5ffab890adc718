"""Instruction-count study: does callgrind's count of a cold compile repeat across processes,
and is a change that adds work to the compiled graph flagged?

Run:  .venv/bin/python -m benchmarks.instructions_study [--runs 5] [--changed 3] [--out FILE]

A scratch git repository holds a perf test of a small model under `compile-default`. Its base
commit is measured with `--perfguard-instructions=compile` and saved as the baseline. Then
each head is measured, each `pytest --perfguard` its own process, and compared with it:
- `identical` (`--runs` times): a commit that changes only a comment. The counts of these
  runs give the spread across processes;
- `more-work` (`--changed` times): `forward` gains one elementwise step inside the graph.
A run is flagged when its `compile_instructions` comparison is a `regression`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.exact_study import MODEL, TEST, sh

EDITS = {"identical": "# an unrelated comment", "more-work": "y = torch.tanh(y) * 0.5 + y"}
ARGS = (
    "--perfguard-device=cpu",
    "--perfguard-budget=0.3",
    "--perfguard-variants=compile-default",
    "--perfguard-instructions=compile",
    "-p",
    "no:cacheprovider",
    "-q",
)


def measure(repo: Path, *extra: str) -> tuple[dict[str, Any], float]:
    out = repo / "out.json"
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    done = sh(
        repo,
        sys.executable,
        "-m",
        "pytest",
        "--perfguard",
        f"--perfguard-json={out}",
        f"--perfguard-report={repo / 'report.md'}",
        "--perfguard-fail-on=never",
        *ARGS,
        *extra,
    )
    seconds = time.perf_counter() - started
    if not out.exists():
        raise SystemExit(f"pytest wrote no results:\n{done.stdout[-3000:]}")
    return json.loads(out.read_text()), seconds


def count_of(doc: dict[str, Any]) -> int | None:
    counters = doc["results"][0].get("counters") or {}
    return counters.get("compile_instructions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--changed", type=int, default=3)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "instructions-study.json"
    )
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="perfguard-instructions-study-") as folder:
        repo = Path(folder)
        (repo / "mymodel.py").write_text(MODEL.replace("# EDIT", "# base"))
        (repo / "test_small.py").write_text(TEST)
        sh(repo, "git", "init", "-q", "-b", "main")
        sh(repo, "git", "add", "-A")
        sh(repo, "git", "commit", "-q", "-m", "base")
        doc, seconds = measure(repo, "--perfguard-save")
        base = count_of(doc)
        print(f"base: {base:,} instructions ({seconds:.0f} s)", flush=True)
        plan = [("identical", i) for i in range(args.runs)]
        plan += [("more-work", i) for i in range(args.changed)]
        for head, index in plan:
            sh(repo, "git", "checkout", "-q", "main")
            sh(repo, "git", "checkout", "-q", "-B", f"{head}-{index}")
            source = MODEL.replace("# EDIT", EDITS[head]) + f"\n# run {index}\n"
            (repo / "mymodel.py").write_text(source)
            sh(repo, "git", "commit", "-q", "-am", f"{head} {index}")
            doc, seconds = measure(repo)
            found = [c for c in doc["comparisons"] if c["metric"] == "compile_instructions"]
            row = {
                "head": head,
                "run": index,
                "count": count_of(doc),
                "change_pct": found[0]["change_pct"] if found else None,
                "verdict": found[0]["verdict"] if found else None,
                "seconds": round(seconds, 1),
            }
            rows.append(row)
            print(
                f"{head:<10} run {index + 1}: {row['count']:,} ({row['change_pct']:+.3f}%, "
                f"{row['verdict']}, {seconds:.0f} s)",
                flush=True,
            )
    same = [r["count"] for r in rows if r["head"] == "identical"] + [base]
    spread = (max(same) - min(same)) / statistics.median(same) * 100
    summary: dict[str, Any] = {
        "base": base,
        "identical_counts": same,
        "spread_pct": round(spread, 4),
        "identical_flagged": sum(
            r["verdict"] != "unchanged" for r in rows if r["head"] == "identical"
        ),
        "more_work_flagged": sum(
            r["verdict"] == "regression" for r in rows if r["head"] == "more-work"
        ),
        "rows": rows,
    }
    print(
        f"{len(same)} processes of identical code: spread {spread:.3f}% of the median; "
        f"identical flagged {summary['identical_flagged']}/{args.runs}, more work flagged "
        f"{summary['more_work_flagged']}/{args.changed}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
