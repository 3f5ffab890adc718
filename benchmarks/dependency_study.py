"""Is a dependency bump judged like a code change? The study of the base side's environment.

Run:  .venv/bin/python -m benchmarks.dependency_study [--runs 10] [--out
          benchmarks/data/dependency-study.json]

A scratch repository pins `workpkg`, a package of this study's own, built here as wheels
(nothing downloads for it): its releases are the model's work, `ROUNDS` matmuls of a
256-wide layer a call. 1.0 does 4 rounds; 1.1 is the same code under a new version; 2.0 does
16 (slower); 1.2 to 1.7 for the bisect, 4 rounds up to 1.4 and 16 from 1.5. On this machine:

1. `runs` pull requests that bump the pin 1.0 -> 2.0, each same-job A/B as the workflow runs
   it (`--perfguard-ab=HEAD~1`, default `--perfguard-base-env=auto`): flagged, with the
   package named in the why;
2. `runs` that bump it 1.0 -> 1.1 (identical code): unchanged;
3. a pull request that adds a pin of a package no test runs (`jinja2`), against a stored
   record of what each test ran: nothing measured;
4. `perfguard bisect --package workpkg --good 1.0 --bad 1.7` over eight versions: the culprit;
5. the cost of the base's environment, cold and warm, with uv and with pip, from a
   requirements file that pins torch and workpkg (perfguard's own requirements added).

The head's environment is this one with the bumped release on PYTHONPATH; the base's is built
by the team's command (`perfguard_install`) on top of this one's packages for 1 to 4, and from
scratch for 5. Nothing else should run meanwhile (the script says how busy it was).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.gitrepo import git
from tests.wheels import make_wheel

HERE = Path(__file__).resolve().parent
RELEASES = {"1.0": 4, "1.1": 4, "1.2": 4, "1.3": 4, "1.4": 4, "1.5": 16, "1.6": 16, "1.7": 16}
RELEASES["2.0"] = 16
PACKAGE = """
import torch

ROUNDS = {rounds}


def work(layer, x):
    for _ in range(ROUNDS):
        x = torch.tanh(layer(x))
    return x
"""
TESTS = """
import pytest, torch
import workpkg

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(256, 256)

    def forward(self, x):
        return workpkg.work(self.l, x)

@pytest.mark.perfguard(variants=["eager"])
def test_net(perfguard):
    torch.manual_seed(0)
    perfguard.run(Net().eval(), (torch.randn(32, 256),))
"""
PYTEST = ("--perfguard-device=cpu", "--perfguard-threads=1", "-p", "no:cacheprovider")


def _purelib_command(inherit: Path) -> str:
    return (
        f'cp {inherit} "$(python -c \'import sysconfig; print(sysconfig.get_path("purelib"))\')" '
        "&& python -m pip install -q --no-deps -r requirements.txt"
    )


def _repo(folder: Path, wheels: Path, pin: str) -> Path:
    repo = folder / "repo"
    repo.mkdir(parents=True)
    inherit = folder / "inherit.pth"
    inherit.write_text("\n".join(p for p in site.getsitepackages() if Path(p).is_dir()) + "\n")
    (repo / "pytest.ini").write_text(f"[pytest]\nperfguard_install = {_purelib_command(inherit)}\n")
    (repo / "test_models.py").write_text(TESTS)
    (repo / "requirements.txt").write_text(f"workpkg=={pin}\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def _head_site(folder: Path, wheels: Path, version: str) -> Path:
    target = folder / f"head-{version}"
    if not target.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links",
             str(wheels), "--target", str(target), f"workpkg=={version}"],
            check=True, capture_output=True,
        )  # fmt: skip
    return target


def _pr(repo: Path, folder: Path, wheels: Path, version: str, cache: Path) -> dict[str, Any]:
    """One pull request bumping the pin to `version`, measured as the workflow measures it."""
    git(repo, "checkout", "-q", "main")
    git(repo, "checkout", "-q", "-B", "bump")
    (repo / "requirements.txt").write_text(f"workpkg=={version}\n")
    git(repo, "commit", "-q", "-am", f"bump workpkg to {version}")
    env = {
        **os.environ,
        "PYTHONPATH": str(_head_site(folder, wheels, version)),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
    }
    env.pop("PIP_CONSTRAINT", None)
    out = folder / "out.json"
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *PYTEST, "--perfguard", "--perfguard-ab=HEAD~1",
         f"--perfguard-json={out}", f"--perfguard-env-cache={cache}", "-q"],
        cwd=repo, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - began
    doc = json.loads(out.read_text())
    p50 = [c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms"]
    named = bool(p50 and p50[0]["reasons"] and p50[0]["reasons"][0]["kind"] == "packages_ran")
    return {
        "version": version,
        "exit": done.returncode,
        "verdict": p50[0]["verdict"] if p50 else None,
        "change_pct": p50[0]["change_pct"] if p50 else None,
        "package_named": named,
        "runs_in": doc["baseline"].get("runs_in"),
        "seconds": round(seconds, 1),
    }


def _cost(folder: Path, installer: str) -> dict[str, Any]:
    """Building the base's environment from a requirements file, cold then warm."""
    from perfguard.environments import build as build_module
    from perfguard.environments.build import environment_for

    tree = folder / f"cost-{installer}"
    tree.mkdir()
    (tree / "requirements.txt").write_text("torch==2.13.0\nworkpkg==1.0\n")
    finder = build_module.find_uv
    if installer == "pip":
        build_module.find_uv = lambda: None
    # workpkg from this study's wheels, torch from the machine's folder of wheels, the rest
    # (perfguard's own requirements) from the index
    links = [str(folder / "wheels"), "/opt/wheels"]
    saved = {k: os.environ.get(k) for k in ("PIP_FIND_LINKS", "UV_FIND_LINKS")}
    os.environ["PIP_FIND_LINKS"] = " ".join(links)
    os.environ["UV_FIND_LINKS"] = ",".join(links)
    try:
        cache = folder / f"cache-{installer}"
        cold = environment_for(tree, cache)
        warm = environment_for(tree, cache)
    finally:
        build_module.find_uv = finder
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {"installer": installer, "cold_s": round(cold.seconds, 1), "warm_cached": warm.cached}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=HERE / "data" / "dependency-study.json")
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="perfguard-dependency-study-") as name:
        folder = Path(name)
        wheels = folder / "wheels"
        for version, rounds in RELEASES.items():
            make_wheel(
                wheels, "workpkg", version, {"workpkg/__init__.py": PACKAGE.format(rounds=rounds)}
            )
        repo = _repo(folder, wheels, "1.0")
        cache = folder / "envs"
        slower = [_pr(repo, folder, wheels, "2.0", cache) for _ in range(args.runs)]
        print(
            "slower:", [(r["verdict"], r["change_pct"] and round(r["change_pct"])) for r in slower]
        )
        same = [_pr(repo, folder, wheels, "1.1", cache) for _ in range(args.runs)]
        print("identical:", [r["verdict"] for r in same])
        unread = _unread_pin(repo, folder, wheels)
        print("a pin no test runs:", unread)
        bisect = _bisect(repo, folder, wheels)
        print("bisect:", bisect["culprit"], bisect["seconds"])
        costs = [] if args.skip_cost else [_cost(folder, "uv"), _cost(folder, "pip")]
        print("costs:", costs)
    doc = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": os.uname().nodename,
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "slower": slower,
        "identical": same,
        "flagged": sum(r["verdict"] == "regression" and r["package_named"] for r in slower),
        "unchanged": sum(r["verdict"] == "unchanged" for r in same),
        "pin_no_test_runs": unread,
        "bisect": bisect,
        "environment_cost": costs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(
        f"slower flagged with the package named: {doc['flagged']} of {args.runs}; identical "
        f"unchanged: {doc['unchanged']} of {args.runs}; written to {args.out}"
    )
    return 0


def _unread_pin(repo: Path, folder: Path, wheels: Path) -> dict[str, Any]:
    """Main's run records what each test ran; a pull request then pins jinja2, which no
    test runs (perfguard's own dependency aside): how much of the suite it measures."""
    git(repo, "checkout", "-q", "main")
    env = {**os.environ, "PYTHONPATH": str(_head_site(folder, wheels, "1.0"))}
    stored = folder / "stored"
    subprocess.run(
        [sys.executable, "-m", "pytest", *PYTEST, "--perfguard", "--perfguard-save",
         f"--perfguard-baseline-dir={stored}", "-q"],
        cwd=repo, env=env, capture_output=True, check=True,
    )  # fmt: skip
    git(repo, "checkout", "-q", "-B", "pin")
    (repo / "requirements.txt").write_text("workpkg==1.0\njinja2==3.1.6\n")
    git(repo, "commit", "-q", "-am", "pin jinja2")
    out = folder / "pin.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *PYTEST, "--perfguard", "--perfguard-ab=HEAD~1",
         f"--perfguard-baseline-dir={stored}", f"--perfguard-json={out}",
         "--perfguard-base-env=same", "-q"],
        cwd=repo, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    selection = doc.get("selection") or {}
    return {
        "exit": done.returncode,
        "measured": len(doc["results"]),
        "unaffected": len(selection.get("unaffected") or ()),
        "reason": selection.get("reason"),
    }


def _bisect(repo: Path, folder: Path, wheels: Path) -> dict[str, Any]:
    git(repo, "checkout", "-q", "main")
    install = _purelib_command(folder / "inherit.pth").replace(
        "-r requirements.txt", f"--no-index --find-links {wheels} {{package}}=={{version}}"
    )
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "perfguard.cli", "bisect", "--package", "workpkg", "--good",
         "1.0", "--bad", "1.7", "--find-links", str(wheels), "--install", install,
         "--env-cache", str(folder / "bisect-envs"), "--json", str(folder / "bisect.json"),
         "--", *PYTEST],
        cwd=repo, capture_output=True, text=True, check=False,
        env={
            **{k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"},
            # the driver collects here (it times nothing): any release does
            "PYTHONPATH": str(_head_site(folder, wheels, "1.0")),
        },
    )  # fmt: skip
    found = json.loads((folder / "bisect.json").read_text()) if done.returncode == 0 else {}
    shutil.rmtree(folder / "bisect-envs", ignore_errors=True)
    return {
        "culprit": found.get("culprit"),
        "measurements": found.get("measurements"),
        "seconds": round(time.monotonic() - began, 1),
        "exit": done.returncode,
        "error": None if done.returncode == 0 else done.stderr.strip().splitlines()[-1:],
    }


if __name__ == "__main__":
    raise SystemExit(main())
