"""The fault audit's harness: a case, what running it gave and how it is judged, the commands
a case runs as a user would, and the seed (a scratch repository with two measured commits)
that the families of `benchmarks.fault_audit`, `fault_cases` and `fault_gate` share."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.gitrepo import git

HERE = Path(__file__).resolve().parent
TOKEN = "ghs_AUDITtoken0123456789abcdef"  # given to every command; must never be printed
PASSWORD = "hunter2-audit-pw"  # in remote URLs; must never be printed
PYTEST_FAST = (
    "--perfguard-variants=eager",
    "--perfguard-budget=0.2",
    "--perfguard-repeats=3",
    "--perfguard-device=cpu",
    "-p",
    "no:cacheprovider",
    "-q",
)
IGNORED = "reports/\n*.json\n__pycache__/\nbaselines/\n"
"""The audit's repositories' .gitignore: what sessions write stays out of their commits."""
MODELS = """
import torch

def test_mlp(perfguard):
    perfguard.run(torch.nn.Sequential(torch.nn.Linear(64, {width}), torch.nn.GELU()).eval(),
                  (torch.randn(4, 64),))

def test_small(perfguard):
    perfguard.run(torch.nn.Linear(32, 32).eval(), (torch.randn(4, 32),))
"""


@dataclass
class Ran:
    rc: int
    out: str  # stdout and stderr together
    seconds: float = 0.0


@dataclass
class Case:
    family: str
    name: str
    expect: str  # "refuse": exit 2 (or 4) naming `names`; "ok": exit in `codes`; "either"
    act: Callable[[Path], tuple[Ran, list[str]]]  # in a fresh folder: what ran, extra problems
    names: str = ""  # a refusal's message must hold this
    codes: tuple[int, ...] = (0,)


@dataclass
class Outcome:
    family: str
    name: str
    expect: str
    rc: int
    clean: bool
    problems: list[str] = field(default_factory=list)
    message: str = ""  # the last line that says something
    seconds: float = 0.0


def run(
    argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> Ran:
    start = time.monotonic()
    full = {**os.environ, "GITHUB_TOKEN": TOKEN, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    full.pop("GITHUB_STEP_SUMMARY", None)
    try:
        done = subprocess.run(
            list(argv), cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Ran(-1, out + f"\n[audit: timed out after {timeout:.0f} s]", timeout)
    return Ran(done.returncode, done.stdout + done.stderr, time.monotonic() - start)


def perfguard(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Ran:
    return run([str(Path(sys.executable).parent / "perfguard"), *args], cwd, env)


def pytest_session(*args: str, cwd: Path, env: dict[str, str] | None = None, drop: str = "") -> Ran:
    """A short session; `drop`: a flag of the fast ones left out (an ini key stands in for it)."""
    fast = [a for a in PYTEST_FAST if not (drop and a.startswith(drop + "="))]
    return run([sys.executable, "-m", "pytest", *fast, *args], cwd, env)


def committed_repo(repo: Path, files: Mapping[str, str], message: str = "base") -> Path:
    """A git repository at `repo` (made, with its parents) holding `files` (a path under it:
    its text) in one commit on `main`."""
    repo.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return repo


def message(out: str) -> str:
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    said = [line for line in lines if re.search(r"error|perfguard|refus|warning", line, re.I)]
    return (said or lines or [""])[-1][:300]


def judge(case: Case, ran: Ran, extra: list[str]) -> Outcome:
    problems = list(extra)
    if "Traceback (most recent call last)" in ran.out or "INTERNALERROR" in ran.out:
        problems.append("a traceback")
    if TOKEN in ran.out or PASSWORD in ran.out:
        problems.append("the token or password printed")
    if ran.rc == -1:
        problems.append("it did not end")
    elif case.expect == "either" and ran.rc == 2:  # refused, or read as it is: both fine
        if case.names and case.names not in ran.out:
            problems.append(f"no line names {case.names!r}")
    elif case.expect == "refuse":
        if ran.rc not in (2, 4):
            problems.append(f"exit {ran.rc} where a refusal exits 2 (pytest's usage error: 4)")
        elif case.names and case.names not in ran.out:
            problems.append(f"no line names {case.names!r}")
    elif ran.rc not in case.codes:
        problems.append(f"exit {ran.rc}, expected {case.codes}")
    return Outcome(
        case.family,
        case.name,
        case.expect,
        ran.rc,
        not problems,
        problems,
        message(ran.out),
        ran.seconds,
    )


# ---- the seed: a real scratch repository, two measured commits, a compared results file ----


@dataclass
class Seed:
    repo: Path  # two commits, each with a stored baseline in repo/baselines
    results: Path  # the second commit's results, compared with the first's baseline
    doc: dict[str, Any]
    baseline_files: list[Path]
    save_seconds: float  # how long the second commit's saving session took


def make_seed(where: Path) -> Seed:
    repo = committed_repo(
        where / "seed",
        {".gitignore": IGNORED, "test_models.py": MODELS.format(width=64)},
        "A",
    )
    first = pytest_session("--perfguard", "--perfguard-save", cwd=repo)
    (repo / "test_models.py").write_text(MODELS.format(width=256))
    git(repo, "commit", "-q", "-am", "B: wider")
    second = pytest_session(
        "--perfguard", "--perfguard-save", "--perfguard-json=results.json", cwd=repo
    )
    if first.rc != 0 or second.rc not in (0, 1):
        raise RuntimeError(f"the seed's sessions failed:\n{first.out}\n{second.out}")
    files = sorted(p for p in (repo / "baselines").rglob("*.json*") if p.parent.name != "summary")
    results = repo / "results.json"
    return Seed(repo, results, json.loads(results.read_text()), files, second.seconds)
