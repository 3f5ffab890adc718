"""What a pull request's verdict costs: a full A/B run against a partial one, and whether a
partial run ever skips what a change reaches.

Run:  .venv/bin/python -m benchmarks.pr_cost cost [--runs 3] [--out benchmarks/data/pr-cost.json]
      .venv/bin/python -m benchmarks.pr_cost study [--out benchmarks/data/pr-selection-study.json]
      .venv/bin/python -m benchmarks.pr_cost cache [--runs 3] [--device cpu]
          [--out benchmarks/data/pr-cache.json]

A scratch repository holds a suite of 10 perf tests (eager), each of its own model of `DEPTH`
Linear blocks whose depth lives in a different file a test reaches: its model module (five
tests), a helper module its model imports (three), a config file its test declares with
`depends` (one), a module of a package imported relatively (one).

Each scratch repository's base commit is first measured as main's run measures it
(`--perfguard-save`), which stores the record of what each test ran that partial runs select
against.

`cost`: a pull request that touches one model's code, run as CI runs it (`pytest --perfguard
--perfguard-ab=<base>` on the head), once in full (`--perfguard-full`) and once partial, in
turn, `--runs` times: wall time, the items measured, the seconds spent in timed calls (both
sides: samples times their mean), compile and the rest (processes, imports, building, the
reference, warm-up, memory, counters, confirmation), per item and in total.

`cache`: the example suite's compiled items (its MLP, CNN and encoder under compile-default)
in a scratch repository: main's run on the base commit writes the compile cache
(`--perfguard-save --perfguard-compile-cache`), then a pull request of identical code is run
A/B beside it `--runs` times without the cache and with it, in turn: wall time, the base
side's compile (cold against loaded), this tree's cold compile (measured either way) and
the medians' paired change. `--device cuda` runs it on a GPU (`make gpu-check`'s `figures`
stage), where the compiles are Triton's and the cache saves the most.

`study`: 10 heads each making one of the 10 files +10% deeper (real compute; each file a
different test reaches) must each measure that test and flag it; 10 heads each touching a
file no test reaches (documentation, a module nothing imports, an image) must measure nothing
and flag nothing. A lockfile change must measure all 10.
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

from tests.gitrepo import git

DEPTH = 24
BUILD = """
import torch
from torch import nn

def build(depth):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(192, 192), nn.ReLU()]
    return nn.Sequential(*layers).eval(), (torch.randn(48, 192),)
"""
TEST = """
import pytest
from models.m{k} import model

@pytest.mark.perfguard(variants=["eager"]{extra})
def test_m{k}(perfguard):
    m, inputs = model()
    perfguard.run(m, inputs)
"""
# where each test's depth lives: the file a +10% change edits
KINDS = ["module"] * 5 + ["helper"] * 3 + ["config", "relative"]


def depth_file(k: int) -> str:
    return {
        "module": f"models/m{k}.py",
        "helper": f"models/parts/p{k}.py",
        "config": f"configs/m{k}.json",
        "relative": f"models/pkg{k}/deep.py",
    }[KINDS[k]]


def write_suite(repo: Path, depths: dict[int, int]) -> None:
    files: dict[str, str] = {
        "models/__init__.py": "",
        "models/parts/__init__.py": "",
        "models/build.py": BUILD,
        "models/unused.py": "UNUSED = 1\n",
        "README.md": "# a model zoo\n",
        "docs/guide.md": "# guide\n",
        ".gitignore": "reports/\nbaselines/\n__pycache__/\n",
    }
    for k, kind in enumerate(KINDS):
        d = depths.get(k, DEPTH)
        extra = ""
        if kind == "module":
            files[f"models/m{k}.py"] = (
                f"from models.build import build\nDEPTH = {d}\n\ndef model():\n"
                "    return build(DEPTH)\n"
            )
        elif kind == "helper":
            files[f"models/parts/p{k}.py"] = f"DEPTH = {d}\n"
            files[f"models/m{k}.py"] = (
                f"from models.build import build\nfrom models.parts.p{k} import DEPTH\n\n"
                "def model():\n    return build(DEPTH)\n"
            )
        elif kind == "config":
            files[f"configs/m{k}.json"] = json.dumps({"depth": d}) + "\n"
            files[f"models/m{k}.py"] = (
                "import json\nfrom pathlib import Path\nfrom models.build import build\n\n"
                "def model():\n"
                f"    cfg = json.loads((Path(__file__).parent.parent / 'configs/m{k}.json')"
                ".read_text())\n    return build(cfg['depth'])\n"
            )
            extra = f', depends=["configs/m{k}.json"]'
        else:
            files[f"models/pkg{k}/__init__.py"] = ""
            files[f"models/pkg{k}/deep.py"] = f"DEPTH = {d}\n"
            files[f"models/pkg{k}/net.py"] = (
                "from models.build import build\nfrom .deep import DEPTH\n\n"
                "def model():\n    return build(DEPTH)\n"
            )
            files[f"models/m{k}.py"] = f"from models.pkg{k}.net import model\n"
        files[f"tests/perf/test_m{k}.py"] = TEST.format(k=k, extra=extra)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


def scratch(repo: Path) -> str:
    """The suite committed, and main's run on it: its baseline, with the record of what each
    test ran that a pull request's partial run selects against."""
    repo.mkdir(parents=True)
    write_suite(repo, {})
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    record(repo)
    return git(repo, "rev-parse", "HEAD")


def record(repo: Path, *extra: str) -> None:
    """Main's run on the checked-out commit (`--perfguard-save`: measured beside its parent
    where it has one, and recorded)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "--perfguard",
         "--perfguard-save", "--perfguard-confirm=0", *extra],
        cwd=repo, capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k != "GITHUB_EVENT_NAME"},
    )  # fmt: skip
    if done.returncode not in (0, 1):
        raise SystemExit(f"main's run failed: {done.stdout[-2000:]}")


def head_commit(repo: Path, base: str, edit: dict[str, str], message: str) -> None:
    """The head: base plus `edit` (path -> new content), committed."""
    git(repo, "checkout", "-q", "--detach", base)
    for name, text in edit.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def deeper(repo: Path, k: int) -> dict[str, str]:
    """The edit that makes test k's model +10% deeper, in the file its depth lives in."""
    path = repo / depth_file(k)
    text = path.read_text()
    new = round(DEPTH * 1.1)
    if KINDS[k] == "config":
        return {depth_file(k): json.dumps({"depth": new}) + "\n"}
    return {depth_file(k): text.replace(f"DEPTH = {DEPTH}", f"DEPTH = {new}")}


UNRELATED: list[tuple[str, str]] = [
    ("README.md", "# a model zoo\n\nnow with a logo\n"),
    ("docs/guide.md", "# guide\n\nmore words\n"),
    ("docs/img/logo.png", "not really a png\n"),
    ("models/unused.py", "UNUSED = 2\n"),
    ("models/new_helper.py", "def helper():\n    return 1\n"),
    ("CHANGELOG.md", "## unreleased\n"),
    ("docs/api.rst", "API\n===\n"),
    ("LICENSE", "MIT\n"),
    (".github/CODEOWNERS", "* @team\n"),
    ("tools/notes.md", "# notes\n"),
]


def run_ab(repo: Path, base: str, *extra: str, device: str = "cpu") -> dict[str, Any]:
    out = repo / "reports" / "out.json"
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "--perfguard",
         f"--perfguard-ab={base}", f"--perfguard-device={device}", f"--perfguard-json={out}",
         *extra],
        cwd=repo, capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k != "GITHUB_EVENT_NAME"},
    )  # fmt: skip
    wall = time.perf_counter() - started
    doc = json.loads(out.read_text()) if out.exists() else {}
    flagged = sorted(
        {c["test"] for c in doc.get("comparisons", []) if c["verdict"] == "regression"}
    )
    items = []
    base_side = {(r["test"], r["variant"]): r for r in doc.get("baseline_results", [])}
    for r in doc.get("results", []):
        sides = [r, base_side.get((r["test"], r["variant"]))]
        timed = sum(_timed_s(s) for s in sides if s is not None)
        compile_s = sum(
            (s["metrics"].get("compile_time_s") or 0)
            + (s["metrics"].get("compile_time_warm_s") or 0)
            for s in sides
            if s is not None
        )
        items.append(
            {"test": r["test"], "timed_s": round(timed, 2), "compile_s": round(compile_s, 2)}
        )
    cost = doc.get("cost") or {}
    sel = doc.get("selection") or {}
    return {
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "measured": len(doc.get("results", [])),
        "flagged": flagged,
        "timed_s": round(sum(i["timed_s"] for i in items), 2),
        "compile_s": round(sum(i["compile_s"] for i in items), 2),
        "measure_s": cost.get("measure_s"),
        "confirm_s": cost.get("confirm_s"),
        "partial": sel.get("partial"),
        "reason": sel.get("reason"),
        "items": items,
        **(
            {"tail": done.stdout.strip().splitlines()[-6:]} if done.returncode not in (0, 1) else {}
        ),
    }


def _timed_s(result: dict[str, Any]) -> float:
    m = result.get("metrics") or {}
    n, mean = m.get("latency_samples"), m.get("latency_mean_ms")
    return (n or 0) * (mean or 0.0) / 1000.0


def cost(runs: int, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="perfguard-pr-cost-") as folder:
        repo = Path(folder) / "repo"
        base = scratch(repo)
        tuned = (
            (repo / "models/m2.py")
            .read_text()
            .replace("    return build(DEPTH)", "    assert DEPTH > 0\n    return build(DEPTH)")
        )  # code, not a comment: a comment changes no block
        head_commit(repo, base, {"models/m2.py": tuned}, "touch one model's code")
        rows = []
        for i in range(runs):
            for mode in ("full", "partial"):
                row = run_ab(repo, base, *(["--perfguard-full"] if mode == "full" else []))
                row.update(run=i + 1, mode=mode)
                rows.append(row)
                print(f"run {i + 1} {mode:<7}: {row['measured']} measured in {row['wall_s']:.1f} s "
                      f"(timed {row['timed_s']:.1f} s, compile {row['compile_s']:.1f} s), "
                      f"exit {row['exit']}", flush=True)  # fmt: skip
    full = [r["wall_s"] for r in rows if r["mode"] == "full"]
    part = [r["wall_s"] for r in rows if r["mode"] == "partial"]
    summary = {
        "full_wall_s_median": statistics.median(full),
        "partial_wall_s_median": statistics.median(part),
        "saving_pct": round(100 * (1 - statistics.median(part) / statistics.median(full)), 1),
    }
    out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))


def _say(what: str, row: dict[str, Any]) -> None:
    verdict = "right" if row["right"] else "WRONG"
    print(
        f"{what:<34} measured {row['measured']}, flagged {row['flagged']} ({verdict}), "
        f"{row['wall_s']:.0f} s",
        flush=True,
    )


def study(out: Path) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfguard-pr-study-") as folder:
        repo = Path(folder) / "repo"
        base = scratch(repo)
        for k in range(len(KINDS)):
            head_commit(repo, base, deeper(repo, k), f"+10% in {depth_file(k)}")
            row = run_ab(repo, base)
            row.update(
                change=depth_file(k), kind=KINDS[k], expected=f"tests/perf/test_m{k}.py::test_m{k}"
            )
            row["right"] = row["flagged"] == [row["expected"]] and row["measured"] == 1
            rows.append(row)
            _say(f"+10% in {depth_file(k)}", row)
        for path, text in UNRELATED:
            head_commit(repo, base, {path: text}, f"touch {path}")
            row = run_ab(repo, base)
            row.update(change=path, kind="unrelated", expected=None)
            row["right"] = row["measured"] == 0 and not row["flagged"] and row["exit"] == 0
            rows.append(row)
            _say(f"unrelated {path}", row)
        head_commit(repo, base, {"uv.lock": "# pinned\n"}, "lockfile")
        lock = run_ab(repo, base)
        lock.update(change="uv.lock", kind="lockfile")
        lock["right"] = lock["measured"] == len(KINDS)
        rows.append(lock)
        print(f"lockfile: measured {lock['measured']} ({'right' if lock['right'] else 'WRONG'})")
    reached = [r for r in rows if r["kind"] not in ("unrelated", "lockfile")]
    unrelated = [r for r in rows if r["kind"] == "unrelated"]
    summary = {
        "reached_flagged": f"{sum(r['right'] for r in reached)}/{len(reached)}",
        "unrelated_quiet": f"{sum(r['right'] for r in unrelated)}/{len(unrelated)}",
        "lockfile_full": lock["right"],
    }
    out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))


def cache(runs: int, out: Path, device: str = "cpu") -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "perf" / "test_models.py"
    select = ["--perfguard-variants=compile-default", "-k", "mlp or convnet or encoder",
              "--perfguard-full"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="perfguard-pr-cache-") as folder:
        repo = Path(folder) / "repo"
        (repo / "tests" / "perf").mkdir(parents=True)
        (repo / "tests" / "perf" / "test_models.py").write_text(example.read_text())
        (repo / ".gitignore").write_text("reports/\nbaselines/\ncc/\n__pycache__/\n")
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "base")
        base = git(repo, "rev-parse", "HEAD")
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "--perfguard",
             "--perfguard-save", f"--perfguard-device={device}", "--perfguard-compile-cache=cc",
             *select],
            cwd=repo, capture_output=True, text=True,
        )  # fmt: skip
        print(f"main's run (writes the cache): exit {done.returncode}, "
              f"{time.perf_counter() - started:.0f} s, "
              f"{len(list((repo / 'cc').glob('*.bin')))} artifact file(s)", flush=True)  # fmt: skip
        head_commit(repo, base, {"README.md": "# same code\n"}, "identical code")
        rows = []
        for i in range(runs):
            for mode in ("cold", "warm"):
                extra = ["--perfguard-compile-cache=cc"] if mode == "warm" else []
                row = run_ab(repo, base, *select, *extra, device=device)
                doc = json.loads((repo / "reports" / "out.json").read_text())
                base_side = doc.get("baseline_results", [])
                row.update(
                    run=i + 1,
                    mode=mode,
                    base_cache=[r["details"].get("compile_cache") for r in base_side],
                    base_compile_s=[
                        r["details"].get("compile_from_cache_s") or r["metrics"]["compile_time_s"]
                        for r in base_side
                    ],
                    head_cold_compile_s=[r["metrics"]["compile_time_s"] for r in doc["results"]],
                    p50_change_pct=[
                        round(c["change_pct"], 1)
                        for c in doc["comparisons"]
                        if c["metric"] == "latency_p50_ms" and c.get("change_pct") is not None
                    ],
                )
                rows.append(row)
                print(f"run {i + 1} {mode}: {row['wall_s']:.0f} s; base compile "
                      f"{sum(row['base_compile_s']):.1f} s {row['base_cache']}; this tree's cold "
                      f"{sum(row['head_cold_compile_s']):.1f} s; p50 {row['p50_change_pct']}",
                      flush=True)  # fmt: skip
    cold = [r["wall_s"] for r in rows if r["mode"] == "cold"]
    warm = [r["wall_s"] for r in rows if r["mode"] == "warm"]
    summary = {
        "device": device,
        "cold_wall_s_median": statistics.median(cold),
        "warm_wall_s_median": statistics.median(warm),
        "factor": round(statistics.median(cold) / statistics.median(warm), 2),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    data = Path(__file__).parent / "data"
    c = sub.add_parser("cost")
    c.add_argument("--runs", type=int, default=3)
    c.add_argument("--out", type=Path, default=data / "pr-cost.json")
    s = sub.add_parser("study")
    s.add_argument("--out", type=Path, default=data / "pr-selection-study.json")
    w = sub.add_parser("cache")
    w.add_argument("--runs", type=int, default=3)
    w.add_argument("--out", type=Path, default=data / "pr-cache.json")
    w.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    if args.command == "cost":
        cost(args.runs, args.out)
    elif args.command == "cache":
        cache(args.runs, args.out, args.device)
    else:
        study(args.out)


if __name__ == "__main__":
    main()
