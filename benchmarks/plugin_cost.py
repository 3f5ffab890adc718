"""What perfguard costs a pytest session that does not ask for it (no `--perfguard`).

Run:  .venv/bin/python -m benchmarks.plugin_cost [--runs 30]
          [--out benchmarks/data/plugin-cost.json]

perfguard is installed into a team's whole test environment, so it is loaded into every
pytest process. A one-test session (the smallest, where a fixed cost weighs most) is run
`--runs` times with perfguard installed as usual and with it switched off (`-p no:perfguard`:
its entry point is never imported, as if uninstalled), in turn, each a fresh interpreter; the
medians of the wall times are compared. It also lists what the session imported of perfguard,
and whether numpy or torch were among them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEST = "def test_one():\n    assert 1 + 1 == 2\n"
PROBE = (
    "import sys, pytest\n"
    "pytest.main(['-q', '-p', 'no:cacheprovider', 'test_one.py'])\n"
    "print('MODULES', sorted(m for m in sys.modules if m.startswith('perfguard')))\n"
    "print('HEAVY', [m for m in ('numpy', 'torch') if m in sys.modules])\n"
)


def session(folder: Path, off: bool) -> float:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"]
    if off:
        args[3:3] = ["-p", "no:perfguard"]
    started = time.perf_counter()
    subprocess.run(args, cwd=folder, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "plugin-cost.json"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfguard-plugin-cost-") as name:
        folder = Path(name)
        (folder / "test_one.py").write_text(TEST)
        session(folder, off=False)  # warm the file cache
        rows = []
        for i in range(args.runs):
            for switched_off in (i % 2 == 0, i % 2 == 1):  # each pair in alternating order
                wall = session(folder, switched_off)
                rows.append({"run": i + 1, "perfguard": not switched_off, "wall_s": wall})
        probe = subprocess.run(
            [sys.executable, "-c", PROBE], cwd=folder, capture_output=True, text=True, check=True
        ).stdout
    on = statistics.median(r["wall_s"] for r in rows if r["perfguard"])
    off = statistics.median(r["wall_s"] for r in rows if not r["perfguard"])
    modules = next(line for line in probe.splitlines() if line.startswith("MODULES"))
    heavy = next(line for line in probe.splitlines() if line.startswith("HEAVY"))
    summary = {
        "runs": args.runs,
        "median_wall_s_installed": round(on, 4),
        "median_wall_s_switched_off": round(off, 4),
        "extra_pct": round(100 * (on / off - 1), 1),
        "perfguard_modules": modules.split(" ", 1)[1],
        "heavy_modules": heavy.split(" ", 1)[1],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
