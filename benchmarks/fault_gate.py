"""The fault audit's `gate` family: runs that did not measure what they claim, a change that
loosens its own bar, and committed input that once crashed or lost the run (run by
`benchmarks.fault_audit`, which says how a case is judged).

Each case is a scratch repository of its own; the check that matters is the Compare job's:
the session and `perfguard report --exit-code` (or `merge`) must not pass it, and one line
must say why."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

from benchmarks.fault_harness import Case, Ran, Seed, git, perfguard, pytest_session

MODEL = """
import pytest, torch

@pytest.mark.perfguard(variants=["eager"])
def test_mlp(perfguard):
    perfguard.run(torch.nn.Linear(16, 16).eval(), (torch.randn(4, 16),))
"""


def _repo(where: Path, files: dict[str, str]) -> Path:
    repo = where / "repo"
    repo.mkdir()
    (repo / ".gitignore").write_text("reports/\n*.json\n__pycache__/\nbaselines/\n")
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def _gate(repo: Path, session: Ran, kind: str) -> tuple[Ran, list[str]]:
    """The session must fail, its JSON hold a gap of `kind`, and `report --exit-code` exit 1
    with one line naming it."""
    problems = []
    if session.rc == 0:
        problems.append("the session passed")
    doc = json.loads((repo / "out.json").read_text()) if (repo / "out.json").exists() else {}
    kinds = {g.get("kind") for g in doc.get("incomplete") or ()}
    if kind not in kinds:
        problems.append(f"no {kind} gap in the results (has {sorted(map(str, kinds))})")
    report = perfguard("report", "out.json", "--exit-code", "-o", "r.md", cwd=repo)
    if report.rc != 1 or "incomplete run" not in report.out:
        problems.append(f"report --exit-code gave {report.rc}: {report.out[-200:]!r}")
    merged = perfguard("merge", "out.json", "-o", "merged.json", cwd=repo)
    if merged.rc != 1:
        problems.append(f"merge gave {merged.rc}")
    return Ran(report.rc, session.out + report.out, session.seconds), problems


def _session(repo: Path, *args: str) -> Ran:
    return pytest_session("--perfguard", "--perfguard-json=out.json", *args, cwd=repo)


def broken_module(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(where, {"test_a.py": MODEL, "test_b.py": "import no_such_module_here\n"})
    return _gate(repo, _session(repo, "--perfguard-compare=none"), "collection_error")


def measures_nothing(where: Path) -> tuple[Ran, list[str]]:
    forgets = MODEL.replace("perfguard.run(", "assert perfguard or (")
    repo = _repo(where, {"test_a.py": forgets})
    return _gate(repo, _session(repo, "--perfguard-compare=none"), "not_measured")


HANGS = """
import time, pytest, torch

class Hangs(torch.nn.Module):
    def forward(self, x):
        while True:
            time.sleep(0.05)

@pytest.mark.perfguard(variants=["eager"], timeout_s=3)
def test_hangs(perfguard):
    perfguard.run(Hangs(), (torch.randn(2, 2),))
"""


def hangs(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(where, {"test_a.py": MODEL, "test_h.py": HANGS})
    return _gate(repo, _session(repo, "--perfguard-compare=none"), "timeout")


def hangs_in_ab(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(where, {"test_a.py": MODEL})
    (repo / "test_h.py").write_text(HANGS)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a hang")
    return _gate(repo, _session(repo, "--perfguard-ab=HEAD~1"), "timeout")


def base_does_not_collect(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(where, {"test_a.py": MODEL, "test_b.py": "import no_such_module_here\n"})
    (repo / "test_b.py").write_text(MODEL.replace("test_mlp", "test_b"))
    git(repo, "commit", "-q", "-am", "mended")
    return _gate(repo, _session(repo, "--perfguard-ab=HEAD~1"), "base_failed")


def deleted_in_ab(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(where, {"test_a.py": MODEL, "test_gone.py": MODEL.replace("mlp", "gone")})
    git(repo, "rm", "-q", "test_gone.py")
    git(repo, "commit", "-q", "-m", "deleted")
    ran, problems = _gate(repo, _session(repo, "--perfguard-ab=HEAD~1"), "deleted")
    doc = json.loads((repo / "out.json").read_text()) if (repo / "out.json").exists() else {}
    rows = {(c.get("test"), c.get("verdict")) for c in doc.get("comparisons") or ()}
    if ("test_gone.py::test_gone", "missing") not in rows:
        problems.append(f"the deleted test is not missing: {sorted(map(str, rows))}")
    return ran, problems


SCRIPTED = """
import pathlib, perfguard.measure.clock as clock
MS = float((pathlib.Path(__file__).parent / "latency_ms.txt").read_text())
def _scripted(self, fn):
    fn()
    return MS
clock.HostClock.time_call = _scripted
"""


def loosens_its_bar(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(where, {"conftest.py": SCRIPTED, "latency_ms.txt": "1.0", "test_a.py": MODEL})
    loose = MODEL.replace('variants=["eager"]', 'variants=["eager"], ab_min_change_pct=900')
    (repo / "test_a.py").write_text(loose)
    (repo / "latency_ms.txt").write_text("17.5")
    git(repo, "commit", "-q", "-am", "slower, its bar raised")
    ran = _session(repo, "--perfguard-ab=HEAD~1")
    problems = [] if ran.rc == 1 else [f"the session gave {ran.rc}, not 1 (a regression)"]
    if "judged by the base's" not in ran.out:
        problems.append("the loosened bar is not named")
    return ran, problems


def _accept_case(content: bytes, words: str) -> Callable[[Path], tuple[Ran, list[str]]]:
    def act(where: Path) -> tuple[Ran, list[str]]:
        repo = _repo(where, {"test_a.py": MODEL})
        pytest_session("--perfguard", "--perfguard-save", cwd=repo)
        (repo / "perfguard-accept.toml").write_bytes(content)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "an accept file")
        ran = _session(repo)
        problems = [] if (repo / "reports" / "perfguard.md").stat().st_size else ["empty report"]
        if words not in ran.out:
            problems.append(f"no line saying {words!r}")
        return ran, problems

    return act


ENTRY = '[[accept]]\ntest = "test_a.py::test_mlp"\nmetric = "latency_p50_ms"\nup_to = "+50%"\n'


def bomb(where: Path) -> tuple[Ran, list[str]]:
    folder = where / "baselines" / "m"
    folder.mkdir(parents=True)
    (folder / f"{'a' * 40}.json.gz").write_bytes(gzip.compress(b" " * (600 * 2**20)))
    return perfguard("baselines", "list", "--dir", str(where / "baselines"), cwd=where), []


def gate_cases(seed: Seed) -> list[Case]:
    return [
        Case("gate", "a perf module that does not import", "ok", broken_module, codes=(1,)),
        Case(
            "gate", "a perf test that never calls perfguard.run", "ok", measures_nothing, codes=(1,)
        ),
        Case("gate", "a model that hangs (timeout_s=3)", "ok", hangs, codes=(1,)),
        Case("gate", "a model that hangs, in A/B", "ok", hangs_in_ab, codes=(1,)),
        Case(
            "gate",
            "a base tree that does not collect, in A/B",
            "ok",
            base_does_not_collect,
            codes=(1,),
        ),
        Case("gate", "a test the change deletes, in A/B", "ok", deleted_in_ab, codes=(1,)),
        Case(
            "gate", "a change that loosens its own bar by +1650%", "ok", loosens_its_bar, codes=(1,)
        ),
        Case(
            "gate",
            "a non-UTF-8 byte in an accept reason",
            "ok",
            _accept_case((ENTRY + 'reason = "w\xffider"\n').encode("latin-1"), "not UTF-8"),
            codes=(2,),
        ),
        Case(
            "gate",
            "an accept file nested 5,000 deep",
            "ok",
            _accept_case(("x = " + "[" * 5000 + "]" * 5000 + "\n").encode(), "nested too deeply"),
            codes=(2,),
        ),
        Case(
            "gate",
            "an accept entry whose test is '*::*'",
            "ok",
            _accept_case(
                ENTRY.replace("test_a.py::test_mlp", "*::*").encode() + b'reason = "r"\n',
                "would accept every test",
            ),
            codes=(2,),
        ),
        Case(
            "gate", "a record that unpacks to 600 MiB", "either", bomb, names="unpacks to more than"
        ),
    ]


FAMILIES = {"gate": gate_cases}
