"""A pull request that only bumps a dependency is judged like a code change: same-job A/B
builds the base's environment from the base's own files and measures the base side there,
and the report names what differs between the two sides' environments.

The repository pins `slowpkg`; its 2.0 makes the model four times slower (the committed
conftest times each call by `slowpkg.LATENCY_MS`, so the verdict does not hang on the load of
the machine). This tree's environment has 2.0 (on its path); the base's environment is built
by the team's install command, from the base's `requirements.txt`, on top of this one's
packages (a `.pth`), so the test installs nothing heavy."""

from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

from perfguard.environments.build import find_uv
from tests import forkserver
from tests.gitrepo import git
from tests.wheels import make_wheel

CONFTEST = '''
"""Every timed call reads slowpkg's milliseconds: its version is the model's speed."""
import random

import perfguard.measure.clock as clock
import slowpkg

_noise = random.Random(7)


def _scripted(self, fn):
    fn()
    return slowpkg.LATENCY_MS * (1.0 + _noise.gauss(0.0, 0.01))


clock.HostClock.time_call = _scripted
'''

TESTS = """
import pytest, torch

@pytest.mark.perfguard(variants=["eager"])
def test_mlp(perfguard):
    torch.manual_seed(0)
    perfguard.run(torch.nn.Linear(16, 16), (torch.randn(4, 16),))
"""

FAST = (
    "--perfguard-device=cpu",
    "--perfguard-budget=0.2",
    "--perfguard-repeats=3",
    "--perfguard-confirm=0",
    "-p",
    "no:cacheprovider",
)


def _this_environment() -> str:
    """The site-packages folders of the interpreter running the tests."""
    return "\n".join(p for p in site.getsitepackages() if Path(p).is_dir())


@pytest.fixture
def bumped(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository: the base pins slowpkg 1.0, the head 2.0; this environment has 2.0."""
    wheels = pytester.path.parent / "wheels"
    for version, ms in (("1.0", 1.0), ("2.0", 4.0)):
        make_wheel(wheels, "slowpkg", version, {"slowpkg/__init__.py": f"LATENCY_MS = {ms}\n"})
    head_site = pytester.path.parent / "head-site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links",
         str(wheels), "--target", str(head_site), "slowpkg==2.0"],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("PYTHONPATH", str(head_site))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    inherit = pytester.path.parent / "inherit.pth"
    inherit.write_text(_this_environment() + "\n")
    # the team's command: the base's own requirements, on top of this environment's packages
    install = (
        f'cp {inherit} "$(python -c \'import sysconfig; print(sysconfig.get_path("purelib"))\')" '
        "&& python -m pip install -q --no-deps -r requirements.txt"
    )
    pytester.makeini(f"[pytest]\nperfguard_install = {install}\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_models=TESTS)
    (pytester.path / "requirements.txt").write_text("slowpkg==1.0\n")
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    (pytester.path / "requirements.txt").write_text("slowpkg==2.0  # the bump\n")
    git(pytester.path, "commit", "-q", "-am", "bump slowpkg")
    return pytester.path


@pytest.mark.slow
def test_a_slower_release_of_a_dependency_is_flagged_with_the_package_named(
    pytester: pytest.Pytester, bumped: Path
) -> None:
    cache = bumped.parent / "envs"
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json",
        f"--perfguard-env-cache={cache}",
    )  # fmt: skip
    assert result.ret == 1, result.stdout.str()
    doc = json.loads((bumped / "out.json").read_text())
    runs_in = doc["baseline"]["runs_in"]
    assert runs_in["how"] == "built" and runs_in["changed"] == ["requirements.txt"]
    assert doc["baseline"]["environment"]["packages"]["slowpkg"] == "1.0"
    assert doc["environment"]["packages"]["slowpkg"] == "2.0"
    verdicts = {
        c["metric"]: c for c in doc["comparisons"] if c["test"] == "test_models.py::test_mlp"
    }
    assert verdicts["latency_p50_ms"]["verdict"] == "regression"
    assert verdicts["latency_p50_ms"]["change_pct"] > 250
    first = verdicts["latency_p50_ms"]["reasons"][0]  # the why names the package first
    assert first["kind"] == "packages_ran" and "slowpkg 1.0 -> 2.0" in first["changes"]
    report = (bumped / "reports" / "perfguard.md").read_text()
    assert "**Dependencies:** this change alters requirements.txt" in report
    assert "| `slowpkg` | 1.0 | 2.0 |" in report
    assert "building with the team's command" in result.stdout.str()
    # the same pull request measured with both sides in this environment: both read 2.0
    again = pytester.runpytest_subprocess(
        *FAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=same.json",
        "--perfguard-base-env=same",
    )  # fmt: skip
    assert again.ret == 0, again.stdout.str()
    same = json.loads((bumped / "same.json").read_text())
    assert same["baseline"]["runs_in"]["how"] == "same"
    assert [c["verdict"] for c in same["comparisons"] if c["metric"] == "latency_p50_ms"] == [
        "unchanged"
    ]


@pytest.mark.slow
def test_a_base_environment_that_cannot_be_built_makes_the_run_incomplete(
    pytester: pytest.Pytester, bumped: Path
) -> None:
    """A pin the index does not have: the base side is not measured, the run is red and
    says what pip said, and the head's figures are kept."""
    git(bumped, "checkout", "-q", "HEAD~1")
    (bumped / "requirements.txt").write_text("slowpkg==9.9\n")
    git(bumped, "commit", "-q", "-am", "an impossible pin")
    impossible = git(bumped, "rev-parse", "HEAD")
    git(bumped, "checkout", "-q", "main")
    result = pytester.runpytest_subprocess(
        *FAST, "--perfguard", f"--perfguard-ab={impossible}", "--perfguard-json=out.json",
        f"--perfguard-env-cache={bumped.parent / 'envs'}",
    )  # fmt: skip
    assert result.ret != 0, result.stdout.str()
    doc = json.loads((bumped / "out.json").read_text())
    gaps = {g["kind"]: g["detail"] for g in doc["incomplete"]}
    assert "could not be built" in gaps["base_failed"] and "slowpkg==9.9" in gaps["base_failed"]
    assert doc["results"] and doc["results"][0]["status"] == "ok"
    assert not any(c["verdict"] == "unchanged" for c in doc["comparisons"])


@pytest.mark.slow
def test_bisect_over_versions_of_a_package_names_the_first_slower_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """slowpkg 1.0 to 1.3; from 1.2 on each call takes four times as long. The tree fixed,
    the versions searched with paired runs between two environments. (Four versions: the
    halving itself is `test_bisect.py`'s; each step here is an A/B run in two
    environments.)"""
    from perfguard.cli import main

    wheels = pytester.path.parent / "wheels"
    for minor in range(4):
        ms = 4.0 if minor >= 2 else 1.0
        make_wheel(wheels, "slowpkg", f"1.{minor}", {"slowpkg/__init__.py": f"LATENCY_MS = {ms}\n"})
    inherit = pytester.path.parent / "inherit.pth"
    inherit.write_text(_this_environment() + "\n")
    uv = find_uv()  # (a development install has it: pip alone took 2 s more an environment)
    pip = f"{uv} pip install --python python" if uv else "python -m pip install"
    install = (
        f'cp {inherit} "$(python -c \'import sysconfig; print(sysconfig.get_path("purelib"))\')" '
        f"&& {pip} -q --no-deps --no-index --find-links {wheels} "
        "{package}=={version}"
    )
    # the driver collects in this environment, which has no slowpkg (it times nothing)
    pytester.makeconftest(
        CONFTEST.replace(
            "import slowpkg",
            "try:\n    import slowpkg\nexcept ImportError:\n    slowpkg = None",
        ).replace("slowpkg.LATENCY_MS *", "(slowpkg.LATENCY_MS if slowpkg else 1.0) *")
    )
    pytester.makepyfile(test_models=TESTS)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "the tree, fixed")
    monkeypatch.chdir(pytester.path)
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    monkeypatch.setattr("perfguard.history.package_bisect.subprocess", forkserver.Sessions())
    code = main(
        [
            "bisect", "--package", "slowpkg", "--good", "1.0", "--bad", "1.3",
            "--find-links", str(wheels), "--install", install,
            "--env-cache", str(pytester.path.parent / "envs"), "--json", "bisect.json",
            "--", *FAST, "--perfguard-budget=0.05",  # a 4x change: the least sampling tells it
        ]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "culprit: slowpkg==1.2" in out.out, out.out + out.err
    found = json.loads((pytester.path / "bisect.json").read_text())
    assert found["culprit"] == "slowpkg==1.2"
    assert found["commits"] == [f"slowpkg==1.{m}" for m in range(4)]
    assert len(found["steps"]) <= 3  # 1.0..1.3, then 1.0..1.1, then the culprit beside 1.1
