"""Op verdicts study: a change of one layer's operator, too small for the whole model's
verdict, found by the verdicts per operator.

Run:  .venv/bin/python -m benchmarks.op_verdicts pad             (the slowdowns' sizes)
      .venv/bin/python -m benchmarks.op_verdicts run --runs 20 --dir DIR
      .venv/bin/python -m benchmarks.op_verdicts analyze --dir DIR [--json OUT]
      .venv/bin/python -m benchmarks.op_verdicts study --device cuda --runs 5 --dir DIR --out OUT

The model is 20 layers, each a Linear and a ReLU (`SIZES`: 256 wide and a batch of 64 on a
CPU; 2048 and 2048 on a GPU, where the matmuls, not the launches, then hold the call). A
scratch git repository holds it as a perf test: its base commit as it is, and three heads:
identical code (another commit), and layer 7's Linear made slower by computing `pad` more
output columns than it returns (every layer slices its output, so both sides run the same
operators; only that matmul's shape differs): the pads that move the whole model by +1% and
+2% on this machine (`pad` finds them: in one process, the two models' calls interleaved,
thousands of calls). Each run is `pytest --perfguard --perfguard-ab=BASE` on a head, as CI
runs a pull request, its verdicts read from the results JSON: the model's own (latency p50)
and each operator's.

`cost`: the wall time of one A/B run with the operators' blocks (the default) and without
them (`--perfguard-op-blocks=0`), in turn. `study`: all of it on one device (`--device cuda`
for the kernels' verdicts: `make gpu-check`'s `study` stage): the pads found once and kept in
`--dir`, the runs, the analysis in `--out`.

A run is kept as JSON in `--dir`; `run` resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.gitrepo import git

DEPTH, SLOWED = 20, 6  # layer 7 is index 6


@dataclass(frozen=True)
class Sizes:
    width: int
    batch: int
    calls: int  # calls per side when `pad` measures the whole model's change


SIZES = {"cpu": Sizes(256, 64, 4000), "cuda": Sizes(2048, 2048, 300)}


def sizes(device: str) -> Sizes:
    return SIZES["cuda" if device.startswith("cuda") else "cpu"]


LEVELS = ("0", "1", "2")  # identical code, +1%, +2% of the model

MODEL = '''\
import torch
from torch import nn

WIDTH, BATCH, DEPTH, SLOWED = {WIDTH}, {BATCH}, {DEPTH}, {SLOWED}
PAD = {pad}  # output columns layer SLOWED's Linear computes besides the WIDTH it returns


class Layer(nn.Module):
    """A Linear and a ReLU; the Linear computes `pad` more columns than it returns (every
    layer slices its output, so the operators are the same whatever the pad)."""

    def __init__(self, pad=0):
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH + pad)

    def forward(self, x):
        return torch.relu(self.fc(x)[:, :WIDTH])


def build(pad=PAD):
    torch.manual_seed(0)
    layers = [Layer(pad if i == SLOWED else 0) for i in range(DEPTH)]
    return nn.Sequential(*layers).eval(), torch.randn(BATCH, WIDTH)
'''

TEST = """\
import pytest
from study_model import build


@pytest.mark.perfguard(variants=["eager"])
def test_layers(perfguard):
    model, x = build()
    perfguard.run(model, (x,))
"""

PYTEST = (
    sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--perfguard",
    "--perfguard-fail-on=never", "--perfguard-report=last-report.md", "--perfguard-full",
)  # fmt: skip


def ab_run(repo: Path, base: str, device: str, out: Path, *extra: str) -> dict[str, Any]:
    """One `pytest --perfguard-ab=BASE` of the checked-out head: its results JSON (kept in
    `out`, which it reads) and its wall time."""
    cmd = [*PYTEST, f"--perfguard-device={device}", f"--perfguard-ab={base}"]
    cmd += [f"--perfguard-json={out.resolve()}", *extra, "test_layers.py"]
    began = time.monotonic()
    subprocess.run(cmd, cwd=repo, check=True, stdout=subprocess.DEVNULL)
    doc: dict[str, Any] = json.loads(out.read_text())
    doc["wall_s"] = round(time.monotonic() - began, 2)
    return doc


def model_source(pad: int, device: str = "cpu") -> str:
    size = sizes(device)
    return MODEL.format(WIDTH=size.width, BATCH=size.batch, DEPTH=DEPTH, SLOWED=SLOWED, pad=pad)


def whole_change(pad: int, device: str = "cpu", seed: int = 0) -> float:
    """The whole model's change (%) with layer 7 padded by `pad` rows: both models in this
    process, their calls interleaved in a random order (each call synchronized on a GPU),
    medians compared."""
    import torch

    namespace: dict[str, Any] = {}
    exec(model_source(pad, device), namespace)
    base, x = namespace["build"](0)
    head, _ = namespace["build"](pad)
    base, head, x = base.to(device), head.to(device), x.to(device)
    on_gpu = device.startswith("cuda")

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    times: dict[str, list[float]] = {"base": [], "head": []}
    rng = random.Random(seed)
    torch.set_num_threads(1)
    with torch.inference_mode():
        for _ in range(50):
            base(x), head(x)
        sync()
        for _ in range(sizes(device).calls):
            order = [("base", base), ("head", head)]
            rng.shuffle(order)
            for name, model in order:
                began = time.perf_counter_ns()
                model(x)
                sync()
                times[name].append(time.perf_counter_ns() - began)
    return 100.0 * (statistics.median(times["head"]) / statistics.median(times["base"]) - 1)


def find_pads(device: str = "cpu") -> dict[str, Any]:
    """The pads nearest +1% and +2% of the whole model (each measured three times): on a CPU
    32 to 256 columns of 256, on a GPU the same fractions of its width."""
    seen = {}
    for pad in (sizes(device).width * n // 256 for n in (32, 64, 96, 128, 192, 256)):
        seen[pad] = statistics.median(whole_change(pad, device, seed=s) for s in range(3))
        print(f"pad {pad:4d}: the model {seen[pad]:+.2f}%", flush=True)
    pick = {level: min(seen, key=lambda p: abs(seen[p] - float(level))) for level in ("1", "2")}
    return {"pads": {str(p): round(c, 3) for p, c in seen.items()}, "chosen": pick}


def repository(
    directory: Path, pads: dict[str, int], device: str = "cpu"
) -> tuple[Path, str, dict[str, str]]:
    repo = directory / "repo"
    index = directory / "commits.json"
    size = sizes(device)
    if index.exists() and (repo / ".git").is_dir():
        saved = json.loads(index.read_text())
        width = saved.get("width", SIZES["cpu"].width)  # the first studies kept no width
        if saved["pads"] != pads or width != size.width:
            raise SystemExit(
                f"{directory} holds a study of other sizes: pads {saved['pads']}, width {width}"
            )
        return repo, saved["base"], saved["heads"]
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "pytest.ini").write_text("[pytest]\nperfguard_threads = 1\n", encoding="utf-8")
    (repo / "test_layers.py").write_text(TEST, encoding="utf-8")
    (repo / "study_model.py").write_text(model_source(0, device), encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    heads = {}
    for level in LEVELS:
        git(repo, "checkout", "-q", "--detach", base)
        source = model_source(pads.get(level, 0), device)
        (repo / "study_model.py").write_text(source, encoding="utf-8")
        git(repo, "commit", "-q", "--allow-empty", "-am", f"head +{level}%")
        heads[level] = git(repo, "rev-parse", "HEAD")
    saved = {"base": base, "heads": heads, "pads": pads, "width": size.width}
    index.write_text(json.dumps(saved), encoding="utf-8")
    return repo, base, heads


def run(directory: Path, runs: int, seed: int, pads: dict[str, int], device: str = "cpu") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    repo, base, heads = repository(directory, pads, device)
    plan = [(level, i) for level in LEVELS for i in range(runs)]
    random.Random(seed).shuffle(plan)
    todo = [(lv, i) for lv, i in plan if not (directory / f"ab-{lv}-{i:03d}.json").exists()]
    began = time.monotonic()
    for done, (level, i) in enumerate(todo, 1):
        out = directory / f"ab-{level}-{i:03d}.json"
        git(repo, "checkout", "-q", "--detach", heads[level])
        tmp = out.with_suffix(".tmp")
        doc = ab_run(repo, base, device, tmp)
        out.write_text(json.dumps(doc), encoding="utf-8")
        tmp.unlink()
        left = (time.monotonic() - began) / done * (len(todo) - done)
        print(
            f"{done}/{len(todo)} +{level}%: {doc['wall_s']} s ({left / 60:.0f} min left)",
            flush=True,
        )


def cost(directory: Path, runs: int, pads: dict[str, int], device: str = "cpu") -> dict[str, Any]:
    """Identical heads, in turn with the operators' blocks and without: each run's wall time and
    the model's timed figures (both sides' p50, the change, the verdict), to show what the
    blocks cost and that the latency samples, taken before them, do not move."""
    repo, base, heads = repository(directory, pads, device)
    git(repo, "checkout", "-q", "--detach", heads["0"])
    runs_by: dict[str, list[dict[str, Any]]] = {"with": [], "without": []}
    for i in range(runs):
        for name, extra in (("with", []), ("without", ["--perfguard-op-blocks=0"])):
            doc = ab_run(repo, base, device, directory / f"cost-{name}-{i:03d}.json", *extra)
            wall = doc["wall_s"]
            p50 = next(c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms")
            runs_by[name].append(
                {
                    "wall_s": wall,
                    "base_p50_ms": p50["baseline"],
                    "head_p50_ms": p50["current"],
                    "change_pct": p50["change_pct"],
                    "verdict": p50["verdict"],
                }
            )
            print(f"{i + 1}/{runs} {name}: {wall} s", file=sys.stderr)
    out: dict[str, Any] = {"runs": runs_by}
    for name, rows in runs_by.items():
        out[f"{name}_median"] = {
            key: statistics.median(r[key] for r in rows)
            for key in ("wall_s", "base_p50_ms", "head_p50_ms", "change_pct")
        }
    pairs = zip(runs_by["with"], runs_by["without"], strict=True)
    out["wall_s_added_median"] = statistics.median(a["wall_s"] - b["wall_s"] for a, b in pairs)
    return out


def analyze(directory: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for level in LEVELS:
        docs = [json.loads(p.read_text()) for p in sorted(directory.glob(f"ab-{level}-*.json"))]
        if not docs:
            continue
        model = {"regression": 0, "improvement": 0, "unchanged": 0, "inconclusive": 0}
        changes, caught, flagged, located, walls = [], 0, 0, 0, []
        places_called: dict[str, int] = {}
        for doc in docs:
            p50 = [c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms"]
            verdict = p50[0]["verdict"] if p50 else "missing"
            model[verdict] = model.get(verdict, 0) + 1
            changes.append(p50[0]["change_pct"] if p50 else None)
            called = [c for c in doc.get("op_comparisons", ()) if c["verdict"] in ("regression",)]
            any_called = [
                c
                for c in doc.get("op_comparisons", ())
                if c["verdict"] in ("regression", "improvement")
            ]
            flagged += bool(any_called)
            for c in any_called:
                key = f"{c['place']} in {c.get('where')}: {c['verdict']}"
                places_called[key] = places_called.get(key, 0) + 1
            slowed = [c for c in called if c.get("where") == f"{SLOWED}.fc"]
            caught += bool(slowed)
            located += bool(slowed) and verdict != "regression"
            walls.append(doc.get("wall_s"))
        out[level] = {
            "runs": len(docs),
            "model_verdicts": model,
            "model_change_pct_median": statistics.median(c for c in changes if c is not None),
            "slowed_op_called": caught,
            "any_op_called": flagged,
            "located_where_the_model_was_not_called": located,
            "places_called": places_called,
            "wall_s_median": statistics.median(w for w in walls if w is not None),
        }
    return out


def study(directory: Path, runs: int, seed: int, device: str) -> dict[str, Any]:
    """The whole study on `device`: its pads found (once: kept in `directory`), `runs` A/B
    runs per level, their analysis."""
    directory.mkdir(parents=True, exist_ok=True)
    kept = directory / "pads.json"
    if kept.exists():
        found = json.loads(kept.read_text())
    else:
        found = find_pads(device)
        kept.write_text(json.dumps(found), encoding="utf-8")
    pads = {level: int(pad) for level, pad in found["chosen"].items()}
    run(directory, runs, seed, pads, device)
    return {"device": device, "sizes": asdict(sizes(device)), "pads": found, **analyze(directory)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    pad = sub.add_parser("pad")
    pad.add_argument("--device", default="cpu")
    for name in ("run", "cost", "analyze", "study"):
        p = sub.add_parser(name)
        p.add_argument("--dir", type=Path, required=True)
        p.add_argument("--runs", type=int, default=20)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--pads", default="1=64,2=128", help="level=pad,... (not for study)")
        p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
        p.add_argument("--json", "--out", dest="json", type=Path)
    args = parser.parse_args()
    if args.cmd == "pad":
        print(json.dumps(find_pads(args.device), indent=1))
        return
    pads = {k: int(v) for k, v in (part.split("=") for part in args.pads.split(","))}
    if args.cmd == "run":
        run(args.dir, args.runs, args.seed, pads, args.device)
        return
    if args.cmd == "study":
        doc = study(args.dir, args.runs, args.seed, args.device)
    elif args.cmd == "cost":
        doc = cost(args.dir, args.runs, pads, args.device)
    else:
        doc = analyze(args.dir)
    text = json.dumps(doc, indent=1)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
