"""The fault audit's family `round4`: the inputs and faults of the environment as part of the
change and of soundness round four, tried as a user would.

A base environment that cannot be built, environments that are not there, option values out
of their bounds, a package bisect asked wrongly, `perfguard init`'s upgrade and the values
GitHub cannot take, `calibrate`'s odd records, a profiler that takes the recording's hook, a
coverage session beside a recording run, a cache key that is no file. Each case is judged as
the audit judges every case (`fault_harness.judge`): no traceback, a refusal that names what
was wrong, the rest ending as documented with its own checks.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.fault_gate import MODEL
from benchmarks.fault_harness import (
    IGNORED,
    Case,
    Ran,
    Seed,
    committed_repo,
    perfguard,
    pytest_session,
)
from tests.gitrepo import git

Act = Callable[[Path], tuple[Ran, list[str]]]


def _repo(where: Path, files: dict[str, str] | None = None) -> Path:
    return committed_repo(
        where / "repo", {".gitignore": IGNORED, "test_a.py": MODEL, **(files or {})}
    )


def _session(*args: str) -> Act:
    def act(where: Path) -> tuple[Ran, list[str]]:
        return pytest_session("--perfguard", *args, cwd=_repo(where)), []

    return act


def _command(*args: str, secret: str = "") -> Act:
    def act(where: Path) -> tuple[Ran, list[str]]:
        ran = perfguard(*args, cwd=_repo(where))
        return ran, [f"{secret!r} echoed"] if secret and secret in ran.out else []

    return act


def unbuildable_base(where: Path) -> tuple[Ran, list[str]]:
    """A bump to a pin the index does not have: the base side is not measured, the run is
    incomplete and says what pip said; the head's figures are kept."""
    repo = _repo(where, {"requirements.txt": "no-such-package-here==1.0\n"})
    (repo / "requirements.txt").write_text("no-such-package-here==2.0\n")
    git(repo, "commit", "-q", "-am", "bump")
    env = {**os.environ, "PIP_NO_INDEX": "1", "UV_NO_INDEX": "1"}
    ran = pytest_session(
        "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json",
        f"--perfguard-env-cache={where / 'envs'}", cwd=repo, env=env,
    )  # fmt: skip
    problems = []
    doc = json.loads((repo / "out.json").read_text()) if (repo / "out.json").exists() else {}
    gaps = {g.get("kind"): g.get("detail", "") for g in doc.get("incomplete") or ()}
    if "base_failed" not in gaps or "no-such-package-here" not in gaps["base_failed"]:
        problems.append(f"no base_failed gap naming the pin ({sorted(map(str, gaps))})")
    if not any(r.get("status") == "ok" for r in doc.get("results") or ()):
        problems.append("the head's figures were lost")
    return ran, problems


def upgrade_keeps_my_test(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(where)
    first = perfguard("init", cwd=repo)
    example = repo / "tests" / "perf" / "test_perf_example.py"
    example.write_text("# mine\n")
    ran = perfguard("init", "--force", cwd=repo)
    problems = [] if first.rc == 0 else [f"init gave {first.rc}"]
    if example.read_text() != "# mine\n":
        problems.append("the upgrade rewrote the user's example test")
    return ran, problems


def profiler_takes_the_hook(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(
        where,
        {"conftest.py": "import sys, pytest\n\n@pytest.fixture(autouse=True)\ndef p():\n"
         "    sys.setprofile(lambda *a: None)\n    yield\n"},
    )  # fmt: skip
    ran = pytest_session(
        "--perfguard", "--perfguard-full", "--perfguard-json=out.json", "--perfguard-compare=none",
        cwd=repo,
    )  # fmt: skip
    doc = json.loads((repo / "out.json").read_text())
    problems = [] if doc.get("reach") is None else ["a record another profiler took was kept"]
    if "not recorded" not in ran.out:
        problems.append("no line saying the record was not made")
    return ran, problems


def beside_coverage(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(where)
    ran = Ran(0, "")
    from benchmarks.fault_harness import PYTEST_FAST, run

    ran = run(
        [sys.executable, "-m", "coverage", "run", "--data-file=.cov", "-m", "pytest",
         *PYTEST_FAST, "--perfguard", "--perfguard-full", "--perfguard-json=out.json",
         "--perfguard-compare=none"],
        repo,
    )  # fmt: skip
    doc = json.loads((repo / "out.json").read_text()) if (repo / "out.json").exists() else {}
    problems = [] if doc.get("reach") else ["no record beside coverage"]
    if any(r.get("status") != "ok" for r in doc.get("results") or ()):
        problems.append("an item failed beside coverage")
    return ran, problems


def odd_calibration(record: object, words: str) -> Act:
    def act(where: Path) -> tuple[Ran, list[str]]:
        path = where / "odd.json"
        where.mkdir(parents=True, exist_ok=True)
        path.write_text(record if isinstance(record, str) else json.dumps(record))
        ran = perfguard("calibrate", "--judge", str(path), cwd=where)
        return ran, [] if words in ran.out else [f"no line saying {words!r}"]

    return act


def fifo_cache_key(where: Path) -> tuple[Ran, list[str]]:
    """Every file of the compile cache's folder a pipe: the item compiles cold and is
    measured; nothing blocks on the pipe."""
    from benchmarks.fault_harness import run

    snippet = (
        "import os, torch\n"
        "from perfguard.measure.compile_cache import CompileCache\n"
        f"c = CompileCache(__import__('pathlib').Path({str(where)!r}), 'load', 'l', 't', 'v')\n"
        "p = c.path(torch.device('cpu')); p.parent.mkdir(parents=True, exist_ok=True)\n"
        "os.mkfifo(p); print(c.load(torch.device('cpu')))\n"
    )
    ran = run([sys.executable, "-c", snippet], where, timeout=60)
    return ran, [] if "not a regular file" in ran.out else ["the pipe was read"]


def round4_cases(seed: Seed) -> list[Case]:
    del seed  # these cases make their own repositories
    item = {"test": {"x": 1}, "variant": "e"}
    calibrate_record = {
        "record": {"version": 1, "rounds": 2, "canary": [10], "canary_rounds": 3,
                   "confirm": 0, "thresholds": {}, "items": [item]},
    }  # fmt: skip
    return [
        Case("round4", "--perfguard-base-env=/nowhere", "refuse",
             _session("--perfguard-ab=HEAD", "--perfguard-base-env=/nowhere"),
             names="--perfguard-base-env"),
        Case("round4", "--perfguard-ab-env=/nowhere", "refuse",
             _session("--perfguard-ab-env=/nowhere"), names="--perfguard-ab-env"),
        Case("round4", "--perfguard-ab-env beside --perfguard-save", "refuse",
             _session("--perfguard-ab-env=/usr", "--perfguard-save"), names="--perfguard-ab-env"),
        Case("round4", "--perfguard-import-timeout=0", "refuse",
             _session("--perfguard-import-timeout=0"), names="--perfguard-import-timeout"),
        Case("round4", "--perfguard-install-timeout=-5", "refuse",
             _session("--perfguard-install-timeout=-5"), names="--perfguard-install-timeout"),
        Case("round4", "a base environment whose pin the index lacks", "ok", unbuildable_base,
             codes=(1,)),
        Case("round4", "bisect --package with --good after --bad", "refuse",
             _command("bisect", "--package", "x", "--good", "2", "--bad", "1", "--versions", "1,2"),
             names="--good"),
        Case("round4", "bisect --package without versions", "refuse",
             _command("bisect", "--package", "x"), names="--good"),
        Case("round4", "bisect with commits and --package", "refuse",
             _command("bisect", "HEAD", "HEAD", "--package", "x", "--good", "1", "--bad", "2"),
             names="--package"),
        Case("round4", "init --shards 1000", "refuse", _command("init", "--shards", "1000"),
             names="--shards"),
        Case("round4", "init --main-branch refs/heads/main", "refuse",
             _command("init", "--main-branch", "refs/heads/main"), names="--main-branch"),
        Case("round4", "init --store with credentials", "refuse",
             _command("init", "--store", "s3://me:hunter2@bucket/x", secret="hunter2"),
             names="--store"),
        Case("round4", "init --force over an edited example test", "ok", upgrade_keeps_my_test),
        Case("round4", "calibrate --canary ''", "refuse",
             _command("calibrate", "--canary", "", "--", "x"), names="--canary"),
        Case("round4", "calibrate --judge of a file nested 100,000 deep", "ok",
             odd_calibration("[" * 100000 + "]" * 100000, "nested too deeply"), codes=(2,)),
        Case("round4", "calibrate --judge of an item whose test is no name", "ok",
             odd_calibration(calibrate_record, "are names"), codes=(2,)),
        Case("round4", "a profiler that takes the recording's hook", "ok", profiler_takes_the_hook),
        Case("round4", "a recording run under coverage run", "ok", beside_coverage),
        Case("round4", "a compile-cache key that is a pipe", "ok", fifo_cache_key),
    ]  # fmt: skip


FAMILIES = {"round4": round4_cases}
