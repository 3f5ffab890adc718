"""Does `perfguard calibrate` predict what the pull request's check does?

Run:  .venv/bin/python -m benchmarks.calibrate_check [--comparisons 40] [--rounds 40]
          [--canary 10] [--variants eager] [--out benchmarks/data/calibrate-check.json]

On the demo suite (examples/perf, in a scratch git repository, its variants as `--variants`
says), on this machine:

1. `perfguard calibrate --rounds N --canary 10`: its predicted false-alarm rate (identical
   rounds flagged after confirmation) and detection rate of a +10% canary, per item;
2. `--comparisons` independent pull-request A/B runs, each `pytest --perfguard
   --perfguard-ab=HEAD` in fresh processes (two new workers, the confirmation's own pair),
   identical trees; and as many with every item's calls on this tree's side made 10% slower
   by the same canary (the driving session's orders: `canary_pct`), in turn.

A run's item is flagged when a gating latency comparison is a regression or an improvement
(after confirmation), caught when it is a regression. The predictions are compared with the
observed rates: the difference in points, and the observed rate's 95% Wilson interval.
Nothing else should run on the machine meanwhile (the script says how busy it was).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.fault_harness import committed_repo

HERE = Path(__file__).resolve().parent
SUITE = HERE.parent / "examples" / "perf" / "test_models.py"
LATENCY = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")


def scratch_repo(root: Path) -> Path:
    files = {
        "tests/test_models.py": SUITE.read_text(),
        "pytest.ini": "[pytest]\n",
        ".gitignore": "reports/\n__pycache__/\n",
    }
    return committed_repo(root / "repo", files, "the demo suite")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def calibrate(
    repo: Path, rounds: int, canary: float, variants: str, keep: Path | None, pairs: int
) -> dict[str, Any]:
    out = keep or repo.parent / "calibration.json"
    cmd = [
        sys.executable,
        "-m",
        "perfguard.cli",
        "calibrate",
        "--pairs",
        str(pairs),
        "--rounds",
        str(rounds),
        "--canary",
        f"{canary:g}",
        "--json",
        str(out),
        "-o",
        str(repo.parent / "calibration.md"),
        "--",
        "tests",
        f"--perfguard-variants={variants}",
        "--perfguard-device=cpu",
    ]
    started = time.monotonic()
    subprocess.run(cmd, cwd=repo, check=False, stdout=subprocess.DEVNULL)
    found: dict[str, Any] = json.loads(out.read_text())
    found["seconds"] = time.monotonic() - started
    return found


def judged_again(path: Path) -> dict[str, Any]:
    """An earlier calibration's record judged by this perfguard's analysis."""
    from perfguard.calibrate import Calibration, analyze

    found = json.loads(path.read_text())
    report = analyze(Calibration.from_json(found["record"])).to_json()
    return {**report, "seconds": found.get("seconds", report["wall_s"])}


def pr_run(repo: Path, canary: float, variants: str, index: int) -> dict[str, Any]:
    """One pull request's A/B run of identical trees; `canary`: this tree's side slowed."""
    results = repo.parent / f"pr-{index}-{canary:g}.json"
    env = dict(os.environ)
    env.pop("PERFGUARD_ORDERS", None)
    if canary:
        env["PERFGUARD_ORDERS"] = json.dumps({"canary_pct": canary})
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests",
        "--perfguard",
        "--perfguard-ab=HEAD",
        f"--perfguard-variants={variants}",
        "--perfguard-device=cpu",
        "--perfguard-record=no",
        f"--perfguard-json={results}",
        f"--perfguard-report={repo.parent / 'pr.md'}",
        "--perfguard-fail-on=never",
    ]
    started = time.monotonic()
    subprocess.run(cmd, cwd=repo, env=env, check=False, stdout=subprocess.DEVNULL)
    run = json.loads(results.read_text())
    items: dict[str, dict[str, Any]] = {}
    for c in run.get("comparisons", []):
        if c["metric"] not in LATENCY or not c.get("gating", True):
            continue
        key = f"{c['test']} [{c['variant']}]"
        mine = items.setdefault(key, {"flagged": False, "caught": False, "change_pct": None})
        mine["flagged"] |= c["verdict"] in ("regression", "improvement")
        mine["caught"] |= c["verdict"] == "regression"
        if c["metric"] == "latency_p50_ms":
            mine["change_pct"] = c.get("change_pct")
            mine["confirm_pct"] = c.get("confirm_change_pct")
    return {"canary": canary, "seconds": time.monotonic() - started, "items": items}


def _load() -> float:
    return os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comparisons", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--canary", type=float, default=10.0)
    parser.add_argument("--variants", default="eager")
    parser.add_argument("--pairs", type=int, default=8, help="calibrate's --pairs")
    parser.add_argument("--out", type=Path, default=HERE / "data" / "calibrate-check.json")
    parser.add_argument(
        "--pr-runs",
        type=Path,
        help="take the pull-request runs from this earlier check's file (calibrate again only)",
    )
    parser.add_argument(
        "--record",
        type=Path,
        help="the calibration's --json (its record included): kept here, or, when it exists, "
        "judged again by this perfguard instead of calibrating",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfguard-calibrate-check-") as tmp:
        repo = scratch_repo(Path(tmp))
        loads = [_load()]
        runs = [] if args.pr_runs is None else json.loads(args.pr_runs.read_text())["runs"]
        if args.rounds == 0:
            cal = None
        elif args.record is not None and args.record.exists():
            cal = judged_again(args.record)
        else:
            print("calibrating ...", flush=True)
            cal = calibrate(repo, args.rounds, args.canary, args.variants, args.record, args.pairs)
            print(f"  {cal['seconds']:.0f} s", flush=True)
        for i in range(args.comparisons if args.pr_runs is None else 0):
            for canary in (0.0, args.canary) if i % 2 == 0 else (args.canary, 0.0):
                runs.append(pr_run(repo, canary, args.variants, i))
                loads.append(_load())
                print(f"  PR run {len(runs)} of {2 * args.comparisons}", flush=True)
    summary = {} if cal is None else summarize(cal, runs, args.canary)
    summary["load_avg_1min"] = {"min": min(loads), "max": max(loads)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


def summarize(cal: dict[str, Any], runs: list[dict[str, Any]], canary: float) -> dict[str, Any]:
    identical = [r for r in runs if not r["canary"]]
    slowed = [r for r in runs if r["canary"]]
    fa_k = sum(i["flagged"] for r in identical for i in r["items"].values())
    fa_n = sum(len(r["items"]) for r in identical)
    det_k = sum(i["caught"] for r in slowed for i in r["items"].values())
    det_n = sum(len(r["items"]) for r in slowed)
    predicted_fa = cal["false_alarm_rate"]
    predicted_det = cal["detection_rate"][f"{canary:g}"]
    observed_fa, observed_det = fa_k / max(fa_n, 1), det_k / max(det_n, 1)
    fa_ci, det_ci = wilson(fa_k, fa_n), wilson(det_k, det_n)
    return {
        "calibration": {
            "rounds": cal["rounds"],
            "canary_rounds": cal["canary_rounds"],
            "seconds": cal["seconds"],
            "launches": cal["launches"],
            "false_alarm_rate": predicted_fa,
            "detection_rate": predicted_det,
            "items": len(cal["items"]),
        },
        "pr_path": {
            "comparisons": len(identical),
            "false_alarms": [fa_k, fa_n],
            "false_alarm_rate": observed_fa,
            "false_alarm_ci95": fa_ci,
            "caught": [det_k, det_n],
            "detection_rate": observed_det,
            "detection_ci95": det_ci,
            "seconds_per_run": sum(r["seconds"] for r in runs) / max(len(runs), 1),
        },
        "false_alarm_points": 100 * abs(predicted_fa - observed_fa),
        "detection_points": 100 * abs(predicted_det - observed_det),
        "within": {
            "false_alarm_2_points": abs(predicted_fa - observed_fa) <= 0.02,
            "false_alarm_interval": fa_ci[0] <= predicted_fa <= fa_ci[1],
            "detection_2_points": abs(predicted_det - observed_det) <= 0.02,
            "detection_interval": det_ci[0] <= predicted_det <= det_ci[1],
        },
    }


if __name__ == "__main__":
    main()
