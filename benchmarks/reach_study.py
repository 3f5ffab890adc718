"""Partial runs against the record of what each test ran: does a pull request measure every
test its change can reach, however the test reaches its model, and what does it save?

Run:  .venv/bin/python -m benchmarks.reach_study patterns [--out .../reach-patterns.json]
      .venv/bin/python -m benchmarks.reach_study overhead [--runs 5] [--vit CLONE]
          [--out .../reach-overhead.json]
      .venv/bin/python -m benchmarks.reach_study replay --repo PATH [--commits 45]
          [--out benchmarks/data/reach-replay.json]

`patterns`: the zoo of `benchmarks/reach_suite.py` (a perf test for each way real suites reach
their models: fixtures, registries, `importlib`, package paths, files read, ...). Main's run
records its base; then each pattern's change makes its model 6 times slower, on a branch of
its own, run as CI runs a pull request (`pytest --perfguard --perfguard-ab=<base>`): its test
must be measured and flagged, and no other measured; each unrelated change must measure
nothing. The record's size per result is quoted.

`overhead`: what recording costs and whether it moves a timed figure, on two real suites (the
example suite, and with `--vit` a clone of lucidrains/vit-pytorch, eight of its models at its
head): each full run `--runs` times with `--perfguard-record=yes` and with `no`, in turn: the
session's wall time, the medians of each item's p50, the record's size per result.

`replay`: a real model repository's history (lucidrains/vit-pytorch, a ViT zoo; `--repo` a
clone of it), with perf tests written as its users would (`REPLAY_TESTS`, eight models at
small sizes). The last `--commits` first-parent commits that touch model code are replayed
as a linear history with the tests committed (each replayed commit carries its original's
tree: everything since the last such commit, version bumps and documentation included). For
each, in order: main's run on it (measured beside its parent, in full: what changed, and the
record), then the same commit run as a pull request (`--perfguard-ab=HEAD~1`, partial,
against the parent's record). A change the full run flagged on a test the partial run did
not measure is a miss. Needs `einops` (`pip install einops`); `torchvision`, which one of
its modules imports at import time and whose CPU wheel does not load here, is a stub outside
the repository.
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

from benchmarks import reach_suite
from tests.gitrepo import git

DATA = Path(__file__).parent / "data"
QUICK = ["--perfguard-device=cpu", "--perfguard-threads=1", "--perfguard-confirm=0"]


def _env(**more: str) -> dict[str, str]:
    """The environment of a session the study runs (a PYTHONPATH given goes before the one
    inherited, which may name the perfguard under study)."""
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_EVENT_NAME"}
    inherited = env.get("PYTHONPATH")
    env.update(more)
    if "PYTHONPATH" in more and inherited:
        env["PYTHONPATH"] = f"{more['PYTHONPATH']}{os.pathsep}{inherited}"
    return env


def pytest_run(repo: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A pytest session in `repo`: its exit, wall time and results file."""
    out = repo / "reports" / "study.json"
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         "--perfguard", f"--perfguard-json={out}", *args],
        cwd=repo, capture_output=True, text=True, env=env or _env(),
    )  # fmt: skip
    wall = time.perf_counter() - started
    doc = json.loads(out.read_text()) if out.exists() else {}
    flagged = sorted(
        {
            c["test"]
            for c in doc.get("comparisons", [])
            if c["verdict"] in ("regression", "improvement") and c.get("gating", True)
        }
    )
    sel = doc.get("selection") or {}
    return {
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "measured": sorted({r["test"] for r in doc.get("results", [])}),
        "flagged": flagged,
        "partial": sel.get("partial"),
        "reason": sel.get("reason"),
        "reached": sel.get("reached", {}),
        "doc": doc,
        **(
            {"tail": done.stdout.strip().splitlines()[-8:]} if done.returncode not in (0, 1) else {}
        ),
    }


def _commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def patterns(out: Path) -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="perfguard-reach-") as folder:
        repo = Path(folder) / "zoo"
        repo.mkdir()
        reach_suite.write(repo)
        (repo / ".gitignore").write_text("reports/\nbaselines/\n__pycache__/\n")
        git(repo, "init", "-q", "-b", "main")
        _commit(repo, "zoo")
        env = _env(PYTHONPATH=str(repo))  # a runner's checkout: sitecustomize.py on the path
        main = pytest_run(repo, *QUICK, "--perfguard-save", env=env)
        base = git(repo, "rev-parse", "HEAD")
        reach = main["doc"].get("reach") or {}
        size = len(json.dumps(reach, separators=(",", ":")))
        results = len(main["doc"].get("results", []))
        print(f"main's run: exit {main['exit']}, {results} results, record {size} bytes "
              f"({size / max(results, 1):.0f} per result)", flush=True)  # fmt: skip
        cases = [
            (name, path, edit, test) for name, (path, edit, test) in reach_suite.SLOWER.items()
        ] + [(name, path, edit, None) for name, (path, edit) in reach_suite.UNRELATED.items()]
        for name, path, edit, test in cases:
            git(repo, "checkout", "-q", "--detach", base)
            reach_suite.apply(repo, path, edit)
            _commit(repo, name)
            row = pytest_run(repo, *QUICK, f"--perfguard-ab={base}", env=env)
            row.pop("doc")
            if test is None:
                row["right"] = not row["measured"] and not row["flagged"] and row["exit"] == 0
            else:  # its test measured and flagged (another measured too is safe, and counted)
                row["right"] = test in row["measured"] and test in row["flagged"]
                row["others_measured"] = len(row["measured"]) - 1
            row.update(pattern=name, change=path, expected=test)
            rows.append(row)
            verdict = "right" if row["right"] else "WRONG"
            print(
                f"{name:<28} measured {row['measured']}, flagged {row['flagged']} ({verdict}), "
                f"{row['wall_s']:.0f} s",
                flush=True,
            )
    reached = [r for r in rows if r["expected"] is not None]
    quiet = [r for r in rows if r["expected"] is None]
    summary = {
        "patterns_measured_and_flagged": f"{sum(r['right'] for r in reached)}/{len(reached)}",
        "patterns_measuring_their_test_alone": sum(r["others_measured"] == 0 for r in reached),
        "unrelated_measured_nothing": f"{sum(r['right'] for r in quiet)}/{len(quiet)}",
        "record_bytes": size,
        "record_bytes_per_result": round(size / max(results, 1)),
    }
    _write(out, summary, rows)


def overhead(runs: int, out: Path, vit: Path | None = None) -> None:
    """Recording's cost on real suites: each suite's full run `runs` times with
    `--perfguard-record=yes` and with `no`, in turn: the session's wall time, the medians of
    each item's p50, and the record's size per result. The suites: the example suite (its
    MLP, CNN, encoder, training step and GPT-2 generation, eager) and, given a clone of
    lucidrains/vit-pytorch (`vit`), its eight ViT-family perf tests at its head."""
    suites: dict[str, Any] = {"example": None}
    if vit is not None:
        suites["vit-pytorch"] = vit
    found: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for name, source in suites.items():
        with tempfile.TemporaryDirectory(prefix="perfguard-reach-overhead-") as folder:
            repo, env = _overhead_repo(Path(folder), source)
            args = [*QUICK, "--perfguard-variants=eager", "--perfguard-compare=none"]
            mine: list[dict[str, Any]] = []
            for i in range(runs):
                for mode in ("no", "yes"):
                    row = pytest_run(repo, *args, f"--perfguard-record={mode}", env=env)
                    doc = row.pop("doc")
                    reach = doc.get("reach")
                    results = len(doc["results"])
                    size = len(json.dumps(reach, separators=(",", ":"))) if reach else 0
                    row.update(suite=name, run=i + 1, record=mode, recorded=reach is not None)
                    row["bytes_per_result"] = round(size / results) if reach and results else None
                    row["p50_ms"] = {
                        r["test"]: r["metrics"]["latency_p50_ms"]
                        for r in doc["results"]
                        if r["status"] == "ok"
                    }
                    mine.append(row)
                    print(f"{name} run {i + 1} record={mode}: {row['wall_s']:.1f} s, "
                          f"recorded {row['recorded']}", flush=True)  # fmt: skip
            rows.extend(mine)
            found[name] = _overhead_summary(mine)
    _write(out, {"runs": runs, "suites": found}, rows)


def _overhead_repo(folder: Path, vit: Path | None) -> tuple[Path, dict[str, str]]:
    """A scratch repository of the example suite, or a checkout of vit-pytorch's head with
    its perf tests committed; and the environment its sessions run in."""
    repo = folder / "repo"
    if vit is None:
        example = Path(__file__).resolve().parent.parent / "examples" / "perf" / "test_models.py"
        (repo / "tests").mkdir(parents=True)
        (repo / "tests" / "test_models.py").write_text(example.read_text())
        git(repo, "init", "-q", "-b", "main")
        _commit(repo, "suite")
        return repo, _env()
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(vit), str(repo)], check=True)
    git(repo, "checkout", "-q", "HEAD", "--", "vit_pytorch")
    (repo / "tests").mkdir(exist_ok=True)
    (repo / "tests" / "test_perf.py").write_text(REPLAY_TESTS)
    stub = folder / "stub"
    for name, text in TORCHVISION_STUB.items():
        (stub / name).parent.mkdir(parents=True, exist_ok=True)
        (stub / name).write_text(text)
    (repo / ".git" / "info" / "exclude").write_text("reports/\nbaselines/\n__pycache__/\n")
    git(repo, "add", "tests/test_perf.py")
    _commit(repo, "perf tests")
    return repo, _env(PYTHONPATH=f"{repo}{os.pathsep}{stub}")


def _overhead_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    tests = sorted({t for r in rows for t in r["p50_ms"]})
    per_test = {}
    for t in tests:
        off = statistics.median(
            r["p50_ms"][t] for r in rows if r["record"] == "no" and t in r["p50_ms"]
        )
        on = statistics.median(
            r["p50_ms"][t] for r in rows if r["record"] == "yes" and t in r["p50_ms"]
        )
        per_test[t] = round(100 * (on / off - 1), 2)
    off_s = statistics.median(r["wall_s"] for r in rows if r["record"] == "no")
    on_s = statistics.median(r["wall_s"] for r in rows if r["record"] == "yes")
    sizes = [r["bytes_per_result"] for r in rows if r["bytes_per_result"]]
    return {
        "p50_change_pct": per_test,
        "wall_s_off": off_s,
        "wall_s_on": on_s,
        "ratio": round(on_s / off_s, 3),
        "bytes_per_result": statistics.median(sizes) if sizes else None,
        "every_recorded_run_has_its_record": all(
            r["recorded"] for r in rows if r["record"] == "yes"
        ),
    }


REPLAY_TESTS = """
import pytest
import torch

SIZE = dict(image_size=32, patch_size=8, num_classes=10, dim=64, depth=2, heads=4, mlp_dim=128)
VIDEO = {**{k: v for k, v in SIZE.items() if k != "patch_size"}, "image_patch_size": 8,
         "frames": 4, "frame_patch_size": 2}
MARK = pytest.mark.perfguard(variants=["eager"])
IMAGES = (torch.randn(4, 3, 32, 32),)
CLIPS = (torch.randn(2, 3, 4, 32, 32),)


@MARK
def test_vit(perfguard):
    from vit_pytorch import ViT
    perfguard.run(ViT(**SIZE).eval(), IMAGES)


@MARK
def test_simple_vit(perfguard):
    from vit_pytorch import SimpleViT
    perfguard.run(SimpleViT(**SIZE).eval(), IMAGES)


@MARK
def test_vit_3d(perfguard):
    from vit_pytorch.vit_3d import ViT
    perfguard.run(ViT(**VIDEO).eval(), CLIPS)


@MARK
def test_simple_vit_3d(perfguard):
    from vit_pytorch.simple_vit_3d import SimpleViT
    perfguard.run(SimpleViT(**VIDEO).eval(), CLIPS)


@MARK
def test_vivit(perfguard):
    from vit_pytorch import vivit
    video_vit = getattr(vivit, "ViViT", None) or vivit.ViT  # renamed within the history
    size = {k: v for k, v in VIDEO.items() if k != "depth"}
    perfguard.run(video_vit(**size, spatial_depth=1, temporal_depth=1).eval(), CLIPS)


@MARK
def test_register_tokens(perfguard):
    from vit_pytorch.simple_vit_with_register_tokens import SimpleViT
    perfguard.run(SimpleViT(**SIZE, num_register_tokens=4).eval(), IMAGES)


@MARK
def test_qk_norm(perfguard):
    from vit_pytorch.simple_vit_with_qk_norm import SimpleViT
    perfguard.run(SimpleViT(**SIZE).eval(), IMAGES)


@MARK
def test_patch_dropout(perfguard):
    from vit_pytorch.simple_vit_with_patch_dropout import SimpleViT
    perfguard.run(SimpleViT(**SIZE, patch_dropout=0.5).eval(), IMAGES)
"""
TORCHVISION_STUB = {
    "torchvision/__init__.py": "from . import transforms  # a stub: benchmarks/reach_study.py\n",
    "torchvision/transforms.py": "def __getattr__(name):\n    return lambda *a, **k: None\n",
}


def replay(repo_url: Path, commits: int, out: Path) -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="perfguard-reach-replay-") as folder:
        top = Path(folder)
        repo = top / "repo"
        # (a stored snapshot may lack its large images: nothing is checked out from it)
        subprocess.run(
            ["git", "clone", "-q", "--no-checkout", str(repo_url), str(repo)], check=True
        )
        stub = top / "stub"
        for name, text in TORCHVISION_STUB.items():
            (stub / name).parent.mkdir(parents=True, exist_ok=True)
            (stub / name).write_text(text)
        env = _env(PYTHONPATH=f"{repo}{os.pathsep}{stub}")
        (repo / ".git" / "info" / "exclude").write_text("reports/\nbaselines/\n__pycache__/\n")
        shas = _replay_history(repo, commits)
        git(repo, "checkout", "-q", "--detach", f"{shas[0]}~1")
        first = pytest_run(repo, *QUICK, "--perfguard-save", "--perfguard-save-unpaired", env=env)
        print(f"record of the first commit's parent: exit {first['exit']}", flush=True)
        for sha in shas:
            git(repo, "checkout", "-q", "--detach", sha)
            changed = git(repo, "diff", "--name-only", "HEAD~1", "HEAD").split()
            full = pytest_run(repo, *QUICK, "--perfguard-save", env=env)
            partial = pytest_run(repo, *QUICK, "--perfguard-ab=HEAD~1", env=env)
            full.pop("doc")
            partial.pop("doc")
            missed = sorted(set(full["flagged"]) - set(partial["measured"]))
            row: dict[str, Any] = {
                "commit": git(repo, "log", "-1", "--format=%b", sha).strip(),
                "subject": git(repo, "log", "-1", "--format=%s", sha)[:80],
                "changed": changed,
                "full": full,
                "partial": partial,
                "missed": missed,
                "saved_pct": round(100 * (1 - partial["wall_s"] / full["wall_s"]), 1)
                if full["wall_s"]
                else None,
            }
            rows.append(row)
            print(f"{row['commit'][:10]} {row['subject'][:36]:<36} full: "
                  f"{len(full['measured'])} measured, flagged {len(full['flagged'])} "
                  f"({full['wall_s']:.0f} s); partial: {len(partial['measured'])} "
                  f"({partial['wall_s']:.0f} s) {partial['reason']}; missed {missed}",
                  flush=True)  # fmt: skip
    good = [r for r in rows if r["full"]["exit"] in (0, 1) and r["partial"]["exit"] in (0, 1)]
    full_s = sum(r["full"]["wall_s"] for r in good)
    partial_s = sum(r["partial"]["wall_s"] for r in good)
    summary = {
        "commits": len(rows),
        "both_ran": len(good),
        "missed": sum(len(r["missed"]) for r in good),
        "full_flagged": sum(len(r["full"]["flagged"]) for r in good),
        "partial_measured_tests": sum(len(r["partial"]["measured"]) for r in good),
        "full_measured_tests": sum(len(r["full"]["measured"]) for r in good),
        "partial_full_runs": sum(
            not r["partial"]["partial"] and bool(r["partial"]["measured"]) for r in good
        ),
        "measured_nothing": sum(not r["partial"]["measured"] for r in good),
        "saved_pct_over_range": round(100 * (1 - partial_s / full_s), 1) if full_s else None,
    }
    _write(out, summary, rows)


KEPT = ("vit_pytorch/", "pyproject.toml", "setup.py", "setup.cfg", "README.md", "LICENSE")
"""What a replayed commit keeps of the original's tree (its images and training scripts
aside): the model code, the build and the documentation."""


def _replay_history(repo: Path, commits: int) -> list[str]:
    """The last `commits` first-parent commits that touch model code, replayed as a linear
    history with the users' perf tests committed in every tree (as a team's tests are): each
    replayed commit has the original's tree (everything since the last such commit) and the
    tests; its message's body is the original's sha."""
    originals = git(
        repo, "log", "--first-parent", "--format=%H", f"-{commits}", "--", "vit_pytorch/*.py"
    ).split()[::-1]
    tests = Path("tests") / "perf" / "test_zoo.py"

    def commit_tree(original: str, message: str) -> str:
        git(repo, "read-tree", original)
        others = [p for p in git(repo, "ls-files").splitlines() if not p.startswith(KEPT)]
        for start in range(0, len(others), 200):  # the model code and the project's files
            git(repo, "rm", "-q", "-f", "--cached", "--", *others[start : start + 200])
        (repo / tests).parent.mkdir(parents=True, exist_ok=True)
        (repo / tests).write_text(REPLAY_TESTS)
        git(repo, "add", str(tests))
        git(repo, "commit", "-q", "--allow-empty", "-m", message)
        return git(repo, "rev-parse", "HEAD")

    git(repo, "checkout", "-q", "--orphan", "replay")
    commit_tree(f"{originals[0]}~1", "the tests, before the replay")
    shas = []
    for original in originals:
        subject = git(repo, "log", "-1", "--format=%s", original)
        shas.append(commit_tree(original, f"{subject}\n\n{original}"))
    git(repo, "checkout", "-q", "--force", shas[-1])
    return shas


def _write(out: Path, summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("patterns")
    p.add_argument("--out", type=Path, default=DATA / "reach-patterns.json")
    o = sub.add_parser("overhead")
    o.add_argument("--runs", type=int, default=5)
    o.add_argument("--out", type=Path, default=DATA / "reach-overhead.json")
    o.add_argument("--vit", type=Path, help="a clone of lucidrains/vit-pytorch (its head)")
    r = sub.add_parser("replay")
    r.add_argument("--repo", type=Path, required=True, help="a clone of lucidrains/vit-pytorch")
    r.add_argument("--commits", type=int, default=45)
    r.add_argument("--out", type=Path, default=DATA / "reach-replay.json")
    args = parser.parse_args()
    if args.command == "patterns":
        patterns(args.out)
    elif args.command == "overhead":
        overhead(args.runs, args.out, args.vit)
    else:
        replay(args.repo, args.commits, args.out)


if __name__ == "__main__":
    main()
