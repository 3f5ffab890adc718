"""What `perfguard report` costs on a large suite's results file, as a user runs it.

Run:  .venv/bin/python benchmarks/report_scale.py [--sizes 1,10] [--runs 3] [--source DIR]
          [--out FILE]

The results file of a 600-test x 8-variant suite compared with its base (4,800 results,
24,000 comparisons, 150 of its tests slower on their first variant: the report tests'
`big_run`), and that file with its results and comparisons copied `--sizes` times under new
test names (10: 48,000 results). Each is reported by `perfguard report FILE -o report.md`
in a new interpreter (reading the file, the comment-sized report and the full one beside it),
`--runs` times; the seconds of each run and their median are printed and written to `--out`.

`--source DIR` runs the `perfguard` package of another checkout (a worktree of an older
commit, say) with this environment's packages: the old path's figure beside the new one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def suite_file(directory: Path, copies: int) -> Path:
    """The results file of `copies` x 4,800 results, made once per folder."""
    path = directory / f"results-{copies}.json"
    if path.exists():
        return path
    one = directory / "results-1.json"
    if not one.exists():
        from tests.test_report import big_run

        one.write_text(json.dumps(big_run().to_json()), encoding="utf-8")
    doc = json.loads(one.read_text(encoding="utf-8"))
    for key in ("results", "comparisons"):
        rows = doc[key]
        doc[key] = [
            {**row, "test": f"{row['test']}-{copy}" if copy else row["test"]}
            for copy in range(copies)
            for row in rows
        ]
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def timed_report(path: Path, source: Path | None, out: Path) -> float:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    command = [sys.executable, "-m", "perfguard.cli", "report", str(path), "-o", str(out)]
    started = time.monotonic()
    subprocess.run(command, env=env, check=True, capture_output=True, cwd=out.parent)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,10", help="copies of the 4,800 results (1,10)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--source", type=Path, help="the checkout whose perfguard to run")
    parser.add_argument("--dir", type=Path, help="where the results files are kept")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/data/report-scale.json")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="perfguard-report-"))
    directory.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "machine": f"{os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
        "source": str(args.source or ROOT),
        "sizes": {},
    }
    for copies in (int(n) for n in args.sizes.split(",")):
        path = suite_file(directory, copies)
        seconds = [
            timed_report(path, args.source, directory / "report.md") for _ in range(args.runs)
        ]
        results = 4800 * copies
        doc["sizes"][str(results)] = {
            "file_mb": round(path.stat().st_size / 2**20, 1),
            "seconds": [round(s, 2) for s in seconds],
            "median_s": round(statistics.median(seconds), 2),
        }
        print(f"{results:,} results: " + ", ".join(f"{s:.2f}" for s in seconds) + " s", flush=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
