"""The fault audit's `gate` family: runs that did not measure what they claim, a change that
loosens its own bar or a setting that softens its verdict, hangs no signal reaches, a model
random in eval mode, a damaged compile cache, and committed input that once crashed or lost
the run (run by `benchmarks.fault_audit`, which says how a case is judged).

Each case is a scratch repository of its own; the check that matters is the Compare job's:
the session and `perfguard report --exit-code` (or `merge`) must not pass it, and one line
must say why."""

from __future__ import annotations

import gzip
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

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

MODEL = """
import pytest, torch

@pytest.mark.perfguard(variants=["eager"])
def test_mlp(perfguard):
    perfguard.run(torch.nn.Linear(16, 16).eval(), (torch.randn(4, 16),))
"""


def _repo(where: Path, files: dict[str, str]) -> Path:
    return committed_repo(where / "repo", {".gitignore": IGNORED, **files})


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


# ---- round three: what a change, a runner or a model must not slip past ----

RAISES_AT_BASE = MODEL.replace(
    "def test_mlp(perfguard):\n",
    "def test_mlp(perfguard):\n    import pathlib\n"
    "    if not pathlib.Path('fixed').exists():\n"
    "        raise RuntimeError('broken at the base')\n",
)


def base_item_fails_in_ab(where: Path) -> tuple[Ran, list[str]]:
    """A change that fixes a crash (and could be 7x slower): not `new`, a named gap."""
    repo = _repo(where, {"test_a.py": RAISES_AT_BASE, "test_b.py": MODEL.replace("mlp", "b")})
    (repo / "fixed").write_text("")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "fixed")
    ran, problems = _gate(repo, _session(repo, "--perfguard-ab=HEAD~1"), "base_failed")
    if "broken at the base" not in (repo / "out.json").read_text():
        problems.append("the base's error is not said")
    return ran, problems


def unhealthy_loosened(where: Path) -> tuple[Ran, list[str]]:
    """`perfguard_unhealthy = inconclusive` in the change's own ini: judged by the base's."""
    repo = _repo(where, {"conftest.py": SCRIPTED, "latency_ms.txt": "1.0", "test_a.py": MODEL})
    (repo / "pytest.ini").write_text("[pytest]\nperfguard_unhealthy = inconclusive\n")
    (repo / "latency_ms.txt").write_text("7.0")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "slower, and inconclusive on a busy runner")
    ran = _session(repo, "--perfguard-ab=HEAD~1")
    problems = [] if ran.rc == 1 else [f"the session gave {ran.rc}, not 1 (a regression)"]
    if "unhealthy inconclusive is looser than the base commit's warn" not in ran.out:
        problems.append("the loosened setting is not named")
    return ran, problems


SPIN = "void spin(void) { volatile unsigned long x = 0; for (;;) { x++; } }\n"
NATIVE = """
import ctypes, pathlib, pytest, torch

class Spins(torch.nn.Module):
    def forward(self, x):
        ctypes.CDLL(str(pathlib.Path(__file__).parent / "spin.so")).spin()

@pytest.mark.perfguard(variants=["eager"], timeout_s=3)
def test_spins(perfguard):
    perfguard.run(Spins(), (torch.randn(2, 2),))
"""


def native_hang(where: Path) -> tuple[Ran, list[str]]:
    """A C loop no signal reaches, in a plain session: ended at its limit and a grace, what
    was measured written (the watchdog)."""
    repo = _repo(where, {"test_a.py": MODEL, "test_n.py": NATIVE, "spin.c": SPIN})
    build = subprocess.run(["cc", "-shared", "-fPIC", "-o", "spin.so", "spin.c"], cwd=repo)
    if build.returncode:
        return Ran(0, "no C compiler: skipped", 0.0), []
    session = _session(repo, "--perfguard-compare=none")
    ran, problems = _gate(repo, Ran(1, session.out, session.seconds), "timeout")
    if session.rc not in (-9, 137):
        problems.append(f"the session gave {session.rc}, not killed")
    return ran, problems


def import_hang(where: Path) -> tuple[Ran, list[str]]:
    """Importing a module has a limit of its own (an item's limit never bounds an import)."""
    repo = _repo(where, {"test_a.py": MODEL, "test_i.py": "import time\ntime.sleep(600)\n"})
    ran = _session(
        repo,
        "--perfguard-compare=none",
        "--perfguard-timeout=3",
        "--perfguard-import-timeout=3",
        "--continue-on-collection-errors",
    )
    return _gate(repo, ran, "collection_error")


def hang_beside_pytest_timeout(where: Path) -> tuple[Ran, list[str]]:
    """pytest-timeout owns SIGALRM; perfguard's limit still holds."""
    repo = _repo(where, {"test_a.py": MODEL, "test_h.py": HANGS})
    return _gate(repo, _session(repo, "--perfguard-compare=none", "--timeout=600"), "timeout")


DROPS = """
class Drops(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(8))

    def forward(self, x):
        for layer in self.layers:
            if torch.rand(()) > 0.5:
                x = x + layer(x)
        return x
"""


def random_in_eval(where: Path) -> tuple[Ran, list[str]]:
    """A model that drops layers at random in eval mode: not judged for drift, never a
    regression, on identical code."""
    drops = MODEL.replace(
        "perfguard.run(torch.nn.Linear(16, 16).eval(), (torch.randn(4, 16),))",
        "perfguard.run(Drops().eval(), (torch.randn(4, 16),))",
    ).replace("import pytest, torch\n", "import pytest, torch\n" + DROPS)
    repo = _repo(where, {"test_a.py": drops})
    git(repo, "commit", "-q", "--allow-empty", "-m", "identical")
    ran = _session(repo, "--perfguard-ab=HEAD~1")
    doc = json.loads((repo / "out.json").read_text()) if (repo / "out.json").exists() else {}
    drift = [c for c in doc.get("comparisons") or () if c.get("metric") == "drift_max_rel"]
    problems = []
    if not drift or any(c["verdict"] == "regression" for c in drift):
        problems.append(f"drift judged: {[c.get('verdict') for c in drift]}")
    elif "not deterministic" not in drift[0].get("note", ""):
        problems.append("no line says the model is not deterministic")
    return ran, problems


def cache_file_rejected(where: Path) -> tuple[Ran, list[str]]:
    """Random bytes where main's compiled artifacts should be: a miss, the cold compile kept."""
    repo = _repo(where, {"test_a.py": MODEL})
    compiled = ("--perfguard-variants=compile-default", "--perfguard-compile-cache=cc")
    drop = "--perfguard-variants"
    pytest_session("--perfguard", "--perfguard-save", *compiled, cwd=repo, drop=drop)
    for path in (repo / "cc").glob("*.bin"):
        path.write_bytes(b"random bytes, not artifacts" * 100)
    git(repo, "commit", "-q", "--allow-empty", "-m", "identical")
    ran = pytest_session(  # identical code: a partial run would measure nothing
        "--perfguard", "--perfguard-json=out.json", "--perfguard-ab=HEAD~1", "--perfguard-full",
        *compiled, cwd=repo, drop=drop,
    )  # fmt: skip
    doc = json.loads((repo / "out.json").read_text()) if (repo / "out.json").exists() else {}
    base = [r.get("details") or {} for r in doc.get("baseline_results") or ()]  # build keys flat
    problems = []
    if not base or base[0].get("compile_cache") != "miss":
        problems.append(f"not a miss: {base}")
    elif "rejected by torch" not in str(base[0].get("compile_cache_miss")):
        problems.append("the miss does not say why")
    return ran, problems


def usage_error(*args: str) -> Callable[[Path], tuple[Ran, list[str]]]:
    def act(where: Path) -> tuple[Ran, list[str]]:
        repo = _repo(where, {"test_a.py": MODEL})
        return _session(repo, *args), []

    return act


def meta_model(where: Path) -> tuple[Ran, list[str]]:
    on_meta = MODEL.replace(
        "perfguard.run(torch.nn.Linear(16, 16).eval(),",
        "perfguard.run(torch.nn.Linear(16, 16, device='meta').eval(),",
    )
    repo = _repo(where, {"test_a.py": on_meta})
    ran = _session(repo, "--perfguard-compare=none")
    problems = [] if "materialize them first" in ran.out else ["no line says what to do"]
    return ran, problems


def accepts_every_test(where: Path) -> tuple[Ran, list[str]]:
    repo = _repo(where, {"test_a.py": MODEL, "test_b.py": MODEL.replace("mlp", "b")})
    pytest_session("--perfguard", "--perfguard-save", cwd=repo)
    (repo / "perfguard-accept.toml").write_text(
        ENTRY.replace("test_a.py::test_mlp", "*test*") + 'reason = "r"\n'
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "accept everything")
    ran = _session(repo)
    merged = perfguard("report", "out.json", "--exit-code", "-o", "r.md", cwd=repo)
    problems = [] if "matches every one of this run's 2 perf tests" in ran.out else ["not named"]
    if merged.rc != 1:
        problems.append(f"report --exit-code gave {merged.rc}")
    return ran, problems


def round_three_cases() -> list[Case]:
    return [
        Case("gate", "a base item that raises, in A/B", "ok", base_item_fails_in_ab, codes=(1,)),
        Case(
            "gate",
            "unhealthy=inconclusive in the change's ini",
            "ok",
            unhealthy_loosened,
            codes=(1,),
        ),
        Case("gate", "a C loop that never returns", "ok", native_hang, codes=(1, 0)),
        Case("gate", "a module that hangs while imported", "ok", import_hang, codes=(1,)),
        Case(
            "gate",
            "a hang beside pytest-timeout's --timeout",
            "ok",
            hang_beside_pytest_timeout,
            codes=(1,),
        ),
        Case(
            "gate", "a model random in eval mode, identical code", "ok", random_in_eval, codes=(0,)
        ),
        Case(
            "gate", "a compile-cache file of random bytes", "ok", cache_file_rejected, codes=(0, 1)
        ),
        Case("gate", "a model on the meta device", "ok", meta_model, codes=(1,)),
        Case(
            "gate",
            "an accept entry '*test*' on a 2-test suite",
            "ok",
            accepts_every_test,
            codes=(2,),
        ),
        Case(
            "gate",
            "--perfguard-device=cuda on a CPU machine",
            "refuse",
            usage_error("--perfguard-device=cuda"),
            names="CUDA is not available here",
        ),
        Case(
            "gate",
            "--perfguard-baseline-dir=ftp://x/y",
            "refuse",
            usage_error("--perfguard-baseline-dir=ftp://x/y"),
            names="cannot be opened",
        ),
        Case(
            "gate",
            "--perfguard-baseline-dir=ftp://x/y with compare none",
            "ok",
            usage_error("--perfguard-baseline-dir=ftp://x/y", "--perfguard-compare=none"),
        ),
    ]


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
        *round_three_cases(),
    ]


FAMILIES = {"gate": gate_cases}
