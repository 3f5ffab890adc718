"""Change-point study: which detector finds main's steps and creeps, and how often it invents one.

Run:  .venv/bin/python benchmarks/history_study.py run [--trials 50] [--out FILE]
          [--otava-python PY] [--edivisive-python PY]

Synthetic histories of 220 commits of main, one value (a p50) per commit:
- steps of +3%, +5% and +10% at commits 40, 80 and 120 (in a random order per history), and
  a creep of ten +2% commits at 160..169, then 50 flat commits;
- as many null histories of identical code (no step at all), for the false rate;
- the noise is this machine's: the relative deviations of real p50s of identical code, each
  from its own process (`benchmarks/data/history-noise.json`, two models, 101 processes),
  resampled in blocks of 5 consecutive runs so that slow spells stay together. Each model's
  noise makes its own histories: `linear` is unimodal (1.6% sd); `conv` is bimodal (a whole
  process now and then runs 2.5x slower, about one run in five).

A step counts as found when a change point lies within 2 commits of it; the creep when one
lies within it (158..171); any other change point is a false one.

Detectors:
- `perfguard`: what `perfguard history` runs (ruptures PELT on the noise-scaled log series,
  each candidate checked by Welch's test, `perfguard.history.changepoints`);
- `ruptures-pelt`: the same PELT candidates without the check;
- `otava`: Apache Otava's `compute_change_points` (e-divisive on sliding windows, t-test merge),
  run in its own environment (`--otava-python`): it pins numpy 2.2 and scipy < 1.17;
- `e-divisive`: MongoDB's `signal-processing-algorithms` e-divisive with its permutation test,
  in its own environment (`--edivisive-python`): it needs numpy < 2.
A detector whose interpreter is not given is left out of the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
NOISE = HERE / "data" / "history-noise.json"
LENGTH = 220
STEPS = (3, 5, 10)
STEP_AT = (40, 80, 120)
CREEP = range(160, 170)
CREEP_PCT = 2
TOLERANCE = 2


def noise_pool(path: Path = NOISE) -> dict[str, np.ndarray]:
    """Per model, the relative deviation of each run's p50 from the model's median, in run order."""
    data = json.loads(path.read_text(encoding="utf-8"))
    pools = {}
    for model in data["runs"][0]:
        values = np.array([r[model] for r in data["runs"] if model in r], dtype=float)
        pools[model] = values / np.median(values) - 1.0
    return pools


def block_noise(pool: np.ndarray, n: int, rng: np.random.Generator, block: int = 5) -> np.ndarray:
    out: list[float] = []
    while len(out) < n:
        start = int(rng.integers(0, len(pool) - block + 1))
        out.extend(pool[start : start + block])
    return np.array(out[:n])


def history(
    rng: np.random.Generator, pool: np.ndarray, *, steps: bool
) -> tuple[list[float], dict[int, int]]:
    """(values, {commit: step %}) of one synthetic history."""
    level = np.ones(LENGTH)
    truth: dict[int, int] = {}
    if steps:
        for at, pct in zip(STEP_AT, rng.permutation(STEPS), strict=True):
            level[at:] *= 1 + pct / 100
            truth[at] = int(pct)
        for at in CREEP:
            level[at:] *= 1 + CREEP_PCT / 100
    return list(level * (1.0 + block_noise(pool, LENGTH, rng))), truth


# --- detectors (the external ones run this file in their own environment) -----------------


def detect_otava(series: list[list[float]]) -> list[list[int]]:
    from otava.analysis import compute_change_points

    return [
        [int(c.index) for c in compute_change_points(s, window_len=50, max_pvalue=0.001)[0]]
        for s in series
    ]


def detect_edivisive(series: list[list[float]]) -> list[list[int]]:
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    return [
        sorted(int(i) for i in e_divisive(np.array(s), pvalue=0.01, permutations=100))
        for s in series
    ]


def detect_perfguard(series: list[list[float]]) -> list[list[int]]:
    from perfguard.history.changepoints import find_steps

    return [[s.index for s in find_steps(values)] for values in series]


def detect_pelt(series: list[list[float]]) -> list[list[int]]:
    from perfguard.history.changepoints import Detection, candidates

    return [candidates(np.log(np.array(values)), Detection()) for values in series]


LOCAL = {"perfguard": detect_perfguard, "ruptures-pelt": detect_pelt}
EXTERNAL = {"otava": detect_otava, "e-divisive": detect_edivisive}


def run_external(name: str, python: str, series: list[list[float]]) -> list[list[int]]:
    with tempfile.TemporaryDirectory() as folder:
        given, found = Path(folder) / "in.json", Path(folder) / "out.json"
        given.write_text(json.dumps(series))
        subprocess.run(
            [python, __file__, "detect", name, str(given), str(found)], check=True, cwd=HERE
        )
        result: list[list[int]] = json.loads(found.read_text())
        return result


# --- scoring -------------------------------------------------------------------------------


def score(found: list[int], truth: dict[int, int]) -> dict[str, Any]:
    hits = {pct: any(abs(i - at) <= TOLERANCE for i in found) for at, pct in truth.items()}
    creep = bool(truth) and any(
        CREEP.start - TOLERANCE <= i < CREEP.stop + TOLERANCE for i in found
    )
    false = [
        i
        for i in found
        if not any(abs(i - at) <= TOLERANCE for at in truth)
        and not (truth and CREEP.start - TOLERANCE <= i < CREEP.stop + TOLERANCE)
    ]
    return {"found": hits, "creep": creep, "false": len(false)}


def _tally(scores: list[dict[str, Any]], truths: list[dict[int, int]]) -> dict[str, Any]:
    stepped = [s for s, t in zip(scores, truths, strict=True) if t]
    null = [s for s, t in zip(scores, truths, strict=True) if not t]
    return {
        "found": {f"+{p}%": sum(s["found"][p] for s in stepped) for p in STEPS},
        "creep": sum(s["creep"] for s in stepped),
        "false_in_stepped": sum(s["false"] for s in stepped),
        "null_with_false": sum(1 for s in null if s["false"]),
        "false_in_null": sum(s["false"] for s in null),
        "histories": len(stepped),
    }


def study(trials: int, seed: int, pythons: dict[str, str]) -> dict[str, Any]:
    """`trials` stepped and `trials` null histories on each model's noise, every detector."""
    rng = np.random.default_rng(seed)
    cases: list[dict[str, Any]] = []
    for model, pool in noise_pool().items():
        for _ in range(trials):
            for steps in (True, False):
                values, truth = history(rng, pool, steps=steps)
                cases.append({"noise": model, "values": values, "truth": truth})
    series = [c["values"] for c in cases]
    engines: dict[str, Any] = {name: (lambda s, f=f: f(s)) for name, f in LOCAL.items()}
    for name, python in pythons.items():
        engines[name] = lambda s, name=name, python=python: run_external(name, python, s)
    table: dict[str, Any] = {}
    for name, engine in engines.items():
        started = time.perf_counter()
        found = engine(series)
        seconds = time.perf_counter() - started
        scores = [score(f, c["truth"]) for f, c in zip(found, cases, strict=True)]
        table[name] = {"seconds_per_history": seconds / len(cases), "change_points": found}
        for model in dict.fromkeys(c["noise"] for c in cases):
            mine = [i for i, c in enumerate(cases) if c["noise"] == model]
            table[name][model] = _tally(
                [scores[i] for i in mine], [cases[i]["truth"] for i in mine]
            )
    return {"trials": trials, "seed": seed, "length": LENGTH, "detectors": table, "cases": cases}


def markdown(result: dict[str, Any]) -> str:
    n = result["trials"]
    lines = [
        "| detector | noise of | +3% found | +5% found | +10% found | creep found | "
        "false (stepped) | null histories with a false one | s per history |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, d in result["detectors"].items():
        for model, t in d.items():
            if not isinstance(t, dict) or "found" not in t:
                continue
            f = t["found"]
            lines.append(
                f"| {name} | {model} | {f['+3%']}/{n} | {f['+5%']}/{n} | {f['+10%']}/{n} | "
                f"{t['creep']}/{n} | {t['false_in_stepped']} | {t['null_with_false']}/{n} | "
                f"{d['seconds_per_history']:.3f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--trials", type=int, default=30, help="histories per model and kind")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", type=Path, default=HERE / "data" / "history-study.json")
    run.add_argument("--otava-python", help="a Python with apache-otava installed")
    run.add_argument("--edivisive-python", help="a Python with signal-processing-algorithms")
    detect = sub.add_parser("detect")  # internal: an external detector in its environment
    detect.add_argument("engine", choices=sorted(EXTERNAL))
    detect.add_argument("given", type=Path)
    detect.add_argument("found", type=Path)
    args = parser.parse_args()
    if args.command == "detect":
        series = json.loads(args.given.read_text())
        args.found.write_text(json.dumps(EXTERNAL[args.engine](series)))
        return
    pythons = {
        name: python
        for name, python in (("otava", args.otava_python), ("e-divisive", args.edivisive_python))
        if python
    }
    result = study(args.trials, args.seed, pythons)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for case in result["cases"]:  # six digits are plenty, and keep the file small
        case["values"] = [round(v, 6) for v in case["values"]]
    args.out.write_text(json.dumps(result) + "\n")
    print(markdown(result))
    print(f"\n(data: {args.out})", file=sys.stderr)


if __name__ == "__main__":
    main()
