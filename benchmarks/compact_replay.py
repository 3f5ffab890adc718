"""Do compact baselines decide as raw samples did? The stored-mode study, replayed both ways.

Run:  .venv/bin/python benchmarks/compact_replay.py [--trials 20] [--dir DIR] [--out FILE]

The detection study's stored mode, measured as it measures (each run its own process, two
models of `DEPTH` blocks, `benchmarks/detection.py worker`): `--history` baselines of
identical code first, then per trial the PR heads of +0% (identical code), +10%, +20% and
+100% in a random order, each compared with the newest baseline, then the next baseline.

Each comparison is made twice, through `compare_runs` with the default thresholds and the
noise floor of the last 20 baselines, as the plugin makes it: once with the baseline as it was
measured (every raw sample), once with the baseline as it is now stored (the compact record,
written and read back through the store's own bytes). The verdicts of every row (model x
metric) must agree; the script lists each disagreement, and the detection rates of both.
Runs are kept in `--dir`, so a second call replays without measuring again.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LEVELS = (0, 10, 20, 100)
HISTORY_WINDOW = 20


def schedule(history: int, trials: int, seed: int) -> list[tuple[str, int, str | None]]:
    """(name, extra %, the baseline it is compared with) in the order they are measured."""
    rng = random.Random(seed)
    steps: list[tuple[str, int, str | None]] = [(f"b{i:03d}", 0, None) for i in range(history)]
    newest = steps[-1][0]
    for t in range(trials):
        levels = list(LEVELS)
        rng.shuffle(levels)
        steps += [(f"t{t:03d}-plus{p:03d}", p, newest) for p in levels]
        nxt = f"b{history + t:03d}"
        steps.append((nxt, 0, newest))
        newest = nxt
    return steps


def measure(steps: list[tuple[str, int, str | None]], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    todo = [s for s in steps if not (directory / f"{s[0]}.json").exists()]
    started = time.monotonic()
    for i, (name, extra, _) in enumerate(todo, 1):
        out = directory / f"{name}.json"
        tmp = out.with_suffix(".tmp")
        cmd = [sys.executable, str(HERE / "detection.py"), "worker", "--extra", str(extra)]
        subprocess.run([*cmd, "--out", str(tmp)], check=True, stderr=subprocess.DEVNULL)
        tmp.rename(out)
        spent = time.monotonic() - started
        print(f"[{i}/{len(todo)}] {name}; {spent / 60:.1f} min so far", flush=True)


def replay(steps: list[tuple[str, int, str | None]], directory: Path) -> dict[str, Any]:
    from perfguard.records import Run
    from perfguard.stats.verdicts import Thresholds, compare_runs
    from perfguard.store.baselines import baseline_bytes
    from perfguard.store.history import history_frame, noise_floor
    from perfguard.store.run_file import parse_run

    raw = {
        name: Run.from_json(json.loads((directory / f"{name}.json").read_text()))
        for name, _, _ in steps
    }
    sizes = {name: len(baseline_bytes(run)) for name, run in raw.items()}
    compact = {name: parse_run(baseline_bytes(run), name) for name, run in raw.items()}
    baselines = [name for name, _, base in steps if name.startswith("b")]
    rows: list[dict[str, Any]] = []
    caught: dict[str, Counter[int]] = {"raw": Counter(), "compact": Counter()}
    heads: Counter[int] = Counter()
    for name, extra, base in steps:
        if base is None:
            continue
        at = baselines.index(base)
        window = baselines[max(0, at - HISTORY_WINDOW + 1) : at + 1]
        decided = {}
        for form, runs in (("raw", raw), ("compact", compact)):
            floor = noise_floor(history_frame([runs[b] for b in window]))
            decided[form] = compare_runs(runs[base], raw[name], Thresholds(), floor)
        for model in {c.test for c in decided["raw"]}:
            heads[extra] += 1
            for form, comparisons in decided.items():
                flagged = any(
                    c.test == model and c.gating and c.verdict == "regression" for c in comparisons
                )
                caught[form][extra] += flagged
        for a, b in zip(decided["raw"], decided["compact"], strict=True):
            assert (a.test, a.metric) == (b.test, b.metric)
            rows.append(
                {
                    "step": name,
                    "extra_pct": extra,
                    "model": a.test,
                    "metric": a.metric,
                    "raw": a.verdict,
                    "compact": b.verdict,
                    "raw_p": a.p_value,
                    "compact_p": b.p_value,
                }
            )
    differ = [r for r in rows if r["raw"] != r["compact"]]
    results_per_run = len(next(iter(raw.values())).results)
    return {
        "comparisons": len(rows),
        "agree": len(rows) - len(differ),
        "disagreements": differ,
        "model_comparisons_per_level": dict(heads),
        "flagged_raw": dict(caught["raw"]),
        "flagged_compact": dict(caught["compact"]),
        "compact_bytes_per_result_median": sorted(sizes.values())[len(sizes) // 2]
        / results_per_run,
        "raw_bytes_per_result_median": sorted(
            len((directory / f"{n}.json").read_bytes()) for n in raw
        )[len(raw) // 2]
        / results_per_run,
        "rows": rows,
    }


def table(doc: dict[str, Any]) -> str:
    lines = [
        "| injected | model comparisons | flagged (raw baseline) | flagged (compact baseline) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for level in LEVELS:
        n = doc["model_comparisons_per_level"].get(str(level), 0)
        raw = doc["flagged_raw"].get(str(level), 0)
        compact = doc["flagged_compact"].get(str(level), 0)
        name = "identical" if level == 0 else f"+{level}%"
        lines.append(f"| {name} | {n} | {raw} | {compact} |")
    lines.append(
        f"\n{doc['agree']} of {doc['comparisons']} verdicts (model x metric) agree; "
        f"{len(doc['disagreements'])} differ."
    )
    for d in doc["disagreements"]:
        lines.append(
            f"- {d['step']} {d['model']} {d['metric']}: raw {d['raw']} (p {d['raw_p']}), "
            f"compact {d['compact']} (p {d['compact_p']})"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("reports/compact-replay"))
    parser.add_argument("--history", type=int, default=8)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "data" / "compact-replay.json")
    parser.add_argument("--replay-only", action="store_true", help="measure nothing")
    args = parser.parse_args()
    steps = schedule(args.history, args.trials, args.seed)
    if not args.replay_only:
        measure(steps, args.dir)
    doc = json.loads(json.dumps(replay(steps, args.dir)))  # str keys, as written
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
