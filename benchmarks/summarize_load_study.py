"""The compact data of the A/B study under load: one row per model comparison.

Run:  .venv/bin/python -m benchmarks.summarize_load_study DIR... [--out FILE]

Each DIR is a `benchmarks/detection.py run-ab --load PATTERN` folder (its name ends with the
pattern); the raw results there hold every sample and are kept out of the repository. The
rows of each pattern given replace that pattern's in FILE; the others are kept.

`--redecide`: judge each run's pairs again with this checkout's rules (`compare_runs`, as
the plugin does in same-job A/B) instead of reading the verdicts the run wrote. The samples
and where each item stopped are the run's own; only the decision is this code's, so a change
to the rules can be weighed on the same measurements.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def redecided(doc: dict[str, Any]) -> dict[str, Any]:
    """The run's comparisons as this checkout decides them from the same pairs."""
    from perfguard.records import Run
    from perfguard.stats.thresholds import Thresholds
    from perfguard.stats.verdicts import compare_runs
    from perfguard.store.schema import upgrade

    doc = upgrade(doc)  # runs written by an older schema
    run = Run.from_json(doc)
    base = Run(commit=None, machine=run.machine, environment={}, results=run.baseline_results)
    th = Thresholds.from_json((doc.get("settings") or {}).get("thresholds"))
    comparisons = compare_runs(base, run, th, paired=True)
    return {**doc, "comparisons": [c.to_json() for c in comparisons]}


def rows(directory: Path, *, redecide: bool = False) -> list[dict[str, Any]]:
    walls = json.loads((directory / "wall_s.json").read_text())
    out = []
    for path in sorted(directory.glob("ab-plus*.json")):
        doc = json.loads(path.read_text())
        if redecide:
            doc = redecided(doc)
        pairs = {r["test"]: (r.get("details") or {}).get("ab", {}) for r in doc["results"]}
        for test in sorted({c["test"] for c in doc["comparisons"]}):
            mine = {c["metric"]: c for c in doc["comparisons"] if c["test"] == test}
            out.append(
                {
                    "run": path.stem,
                    "injected_pct": int(path.stem.split("-")[1].removeprefix("plus")),
                    "model": test.rsplit("[", 1)[-1].rstrip("]"),
                    "pairs": pairs.get(test, {}).get("pairs"),
                    "p50_change_pct": round(mine["latency_p50_ms"]["change_pct"], 2),
                    "verdicts": {m: c["verdict"] for m, c in mine.items() if c["gating"]},
                    "wall_s": walls.get(path.stem),
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", type=Path, nargs="+")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "detection-load.json"
    )
    parser.add_argument("--redecide", action="store_true", help="judge with this checkout's rules")
    args = parser.parse_args()
    # a pattern not among DIRS keeps its rows from FILE (a study of one pattern run again)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {}
    doc.update({d.name.rsplit("-", 1)[-1]: rows(d, redecide=args.redecide) for d in args.dirs})
    args.out.write_text(json.dumps(doc, indent=0) + "\n")
    print({k: len(v) for k, v in doc.items()}, "->", args.out)


if __name__ == "__main__":
    main()
