"""The environment as part of the change (`perfguard.environments`): which changes alter
what gets installed, an environment built from a tree's own files with uv or with pip and
cached by their hash, a build that fails named by the installer's last lines, and where
same-job A/B's base side runs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from perfguard.environments import (
    EnvironmentBuildError,
    EnvironmentChoiceError,
    base_environment,
    environment_for,
    find_uv,
    interpreter,
)
from perfguard.environments import build as build_module
from perfguard.environments.install import changed_installs, install_files, requirements
from tests.wheels import make_wheel

POETRY_LOCK = """
[[package]]
name = "slowpkg"
version = "{v}"

[[package]]
name = "mine"
version = "0.1"
[package.source]
type = "directory"
url = "."

[metadata]
lock-version = "2.0"
"""


PYPROJECT = '[project]\nname="m"\nversion="{v}"\ndependencies=["a{pin}"]\n'
CASES = [
    ("requirements.txt", "torch==2.13.0\nslowpkg==1.0\n", "torch==2.13.0\nslowpkg==2.0\n", True),
    ("requirements.txt", "slowpkg==1.0\n", "# the pin we ship\nslowpkg==1.0  # fast\n", False),
    ("requirements-dev.txt", None, "pytest\n", True),
    ("constraints.txt", "numpy<2\n", "numpy<3\n", True),
    ("pyproject.toml", PYPROJECT.format(v=1, pin=""),
     PYPROJECT.format(v=2, pin="") + "[tool.ruff]\nline-length=99\n", False),
    ("pyproject.toml", PYPROJECT.format(v=1, pin="==1"), PYPROJECT.format(v=1, pin="==2"), True),
    ("poetry.lock", POETRY_LOCK.format(v="1.0"), POETRY_LOCK.format(v="2.0"), True),
    ("Pipfile.lock", '{"default": {"a": {"version": "==1"}}}',
     '{"default": {"a": {"version": "==1"}}, "_meta": {}}', False),
    ("environment.yml", "dependencies:\n  - pytorch=2.13\n",
     "dependencies:\n  - pytorch=2.14\n", True),
    ("setup.cfg", "[options]\ninstall_requires = a\n[flake8]\nx=1\n",
     "[options]\ninstall_requires = a\n[flake8]\nx=2\n", False),
    ("src/model.py", "x = 1\n", "x = 2\n", False),
]  # fmt: skip


@pytest.mark.parametrize(("path", "before", "after", "changed"), CASES)  # fmt: skip
def test_a_change_alters_what_gets_installed_only_where_its_tables_do(
    path: str, before: str | None, after: str, changed: bool
) -> None:
    assert changed_installs([path], {path: before}, {path: after}) == ([path] if changed else [])


def test_a_trees_files_become_one_requirements_file(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("slowpkg==1.0\n")
    (tmp_path / "constraints.txt").write_text("numpy<3\n")
    (tmp_path / "poetry.lock").write_text(POETRY_LOCK.format(v="1.0"))
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\nversion = "0.1"\n')
    (tmp_path / "README.md").write_text("not a dependency file\n")
    assert install_files(tmp_path) == [
        "constraints.txt", "poetry.lock", "pyproject.toml", "requirements.txt",
    ]  # fmt: skip
    found = requirements(tmp_path, ["jinja2>=3.1"])
    assert found.lines == (
        f"-c {tmp_path / 'constraints.txt'}",
        "slowpkg==1.0",  # the lock's, not its own directory package
        f"-r {tmp_path / 'requirements.txt'}",
        f"-e {tmp_path}",
        "jinja2>=3.1",
    )


@pytest.fixture
def wheels(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """slowpkg 1.0 and 2.0, and nothing else: both installers look only there."""
    folder = tmp_path_factory.mktemp("wheels")
    for version, work in (("1.0", 1), ("2.0", 4)):
        make_wheel(folder, "slowpkg", version, {"slowpkg/__init__.py": f"WORK = {work}\n"})
    for name, value in (("NO_INDEX", "1"), ("FIND_LINKS", str(folder))):
        monkeypatch.setenv(f"PIP_{name}", value)
        monkeypatch.setenv(f"UV_{name}", value)
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    return folder


def _tree(root: Path, pin: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "requirements.txt").write_text(f"slowpkg=={pin}\n")
    return root


def _work(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import slowpkg; print(slowpkg.WORK)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_an_environment_is_built_from_the_trees_files_once_and_then_taken_from_the_cache(
    tmp_path: Path, wheels: Path, monkeypatch: pytest.MonkeyPatch, installer: str
) -> None:
    if installer == "pip":
        monkeypatch.setattr(build_module, "find_uv", lambda: None)
    elif find_uv() is None:
        pytest.skip("uv is not installed here")
    cache, said = tmp_path / "cache", list[str]()
    first = environment_for(_tree(tmp_path / "a", "1.0"), cache, own=[], say=said.append)
    assert not first.cached and first.installer == installer and _work(first.python) == "1"
    again = environment_for(_tree(tmp_path / "b", "1.0"), cache, own=[])  # another folder
    assert again.cached and again.key == first.key and again.python == first.python
    other = environment_for(_tree(tmp_path / "c", "2.0"), cache, own=[])
    assert other.key != first.key and _work(other.python) == "4"
    assert any("building with" in line for line in said)
    meta = json.loads((first.folder / ".perfguard-complete").read_text())
    assert meta["sources"] == ["requirements.txt"]


@pytest.mark.slow
def test_an_environment_that_cannot_be_built_says_what_the_installer_said(
    tmp_path: Path, wheels: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_module, "find_uv", lambda: None)
    with pytest.raises(EnvironmentBuildError) as failed:
        environment_for(_tree(tmp_path / "a", "9.9"), tmp_path / "cache", own=[])
    message = str(failed.value)
    assert "failed (exit code" in message and "slowpkg==9.9" in message
    assert not list((tmp_path / "cache").glob("*/.perfguard-complete"))  # nothing kept
    # a command that outlives the limit is ended, and says so
    with pytest.raises(EnvironmentBuildError, match="past its limit"):
        environment_for(
            tmp_path / "a", tmp_path / "cache", install="sleep 30", timeout_s=1.5, own=[]
        )


@pytest.mark.slow
def test_the_teams_install_command_runs_in_the_tree_with_the_environment_first(
    tmp_path: Path, wheels: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_module, "find_uv", lambda: None)
    tree = _tree(tmp_path / "a", "2.0")
    command = "python -m pip install -q slowpkg==1.0 && pwd > where.txt"
    built = environment_for(tree, tmp_path / "cache", install=command, own=[])
    assert _work(built.python) == "1" and built.installer == f"command: {command}"
    assert (tree / "where.txt").read_text().strip() == str(tree)


def test_where_the_base_side_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    args = {"cache": tmp_path / "cache", "install": None, "timeout_s": 60.0, "say": said.append}
    same = base_environment("same", ["requirements.txt"], {}, {}, tmp_path, **args)  # type: ignore[arg-type]
    assert same.python is None and same.to_json()["how"] == "same"
    python = Path(os.sys.executable)  # type: ignore[attr-defined]
    given = base_environment(str(python), [], {}, {}, tmp_path, **args)  # type: ignore[arg-type]
    assert given.python == interpreter(python, "x") and given.to_json()["how"] == "given"
    with pytest.raises(EnvironmentChoiceError, match="--perfguard-base-env=/nowhere"):
        base_environment("/nowhere", [], {}, {}, tmp_path, **args)  # type: ignore[arg-type]
    untouched = base_environment(
        "auto", ["requirements.txt"], {"requirements.txt": "a==1\n"},
        {"requirements.txt": "a==1  # same\n"}, tmp_path, **args,  # type: ignore[arg-type]
    )  # fmt: skip
    assert untouched.python is None and untouched.built is None

    def refuse(*_a: object, **_k: object) -> object:
        raise EnvironmentBuildError("pip install failed (exit code 1): no slowpkg==9.9")

    monkeypatch.setattr("perfguard.environments.environment_for", refuse)
    failed = base_environment(
        "auto", ["requirements.txt"], {"requirements.txt": "slowpkg==1.0\n"},
        {"requirements.txt": "slowpkg==9.9\n"}, tmp_path, **args,  # type: ignore[arg-type]
    )  # fmt: skip
    assert failed.error is not None and "slowpkg==9.9" in failed.error
    assert failed.to_json()["how"] == "failed" and failed.changed == ("requirements.txt",)


def test_a_stored_verdict_across_a_new_driver_is_an_environment_step_and_names_packages() -> None:
    from dataclasses import replace

    from perfguard.pipeline.compare import environment_steps, with_packages_first
    from perfguard.records import BaselineRef
    from perfguard.stats.verdicts import compare_runs
    from tests.factories import result, run

    base = run([result("t.py::test_m", "eager", 1.0)], cuda="12.8", gpu_driver="570.1")
    base = replace(base, environment={**base.environment, "packages": {"torch": "2.13.0"}})
    head = run([result("t.py::test_m", "eager", 2.0, seed=1)], cuda="13.0", gpu_driver="580.2")
    head = replace(
        head,
        environment={**head.environment, "packages": {"torch": "2.14.0", "jinja2": "3.1.6"}},
        baseline=BaselineRef(commit="a" * 40, reason="stored", environment=base.environment),
    )
    head = replace(head, comparisons=compare_runs(base, head))
    flagged = [c for c in head.comparisons if c.verdict == "regression"]
    assert flagged
    stepped = environment_steps(head, base)
    kinds = {r.kind for c in stepped.comparisons if c.verdict == "regression" for r in c.reasons}
    assert "environment_step" in kinds
    step = next(r for c in stepped.comparisons for r in c.reasons if r.kind == "environment_step")
    words = step["changes"]
    assert "CUDA 12.8 -> 13.0" in str(words) and "the NVIDIA driver 570.1 -> 580.2" in str(words)
    named = with_packages_first(stepped, base)
    firsts = [c.reasons[0] for c in named.comparisons if c.verdict == "regression"]
    assert all(r.kind == "packages_ran" for r in firsts)
    assert "torch 2.13.0 -> 2.14.0" in str(firsts[0]["changes"])


def test_the_packages_are_read_from_each_distributions_header(tmp_path: Path) -> None:
    """Name and version from the metadata's header lines, as the full parse reads them; a
    description that says `Name:` after the blank line is not the header."""
    import importlib.metadata
    import re

    from perfguard.environment import _name_and_version, installed_packages

    info = tmp_path / "Some_Pkg-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: Some_Pkg\nVersion: 1.2\n\nName: not-this\nVersion: 9\n"
    )
    (dist,) = importlib.metadata.distributions(path=[str(tmp_path)])
    assert _name_and_version(dist) == ("Some_Pkg", "1.2") == (dist.metadata["Name"], dist.version)
    parsed: dict[str, str] = {}  # what the whole parse finds, in the same order
    for each in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", each.metadata["Name"]).lower()
        parsed.setdefault(name, each.version)
    assert installed_packages() == dict(sorted(parsed.items()))


@pytest.mark.parametrize(
    ("runs_in", "said"),
    [
        ({"how": 12345, "changed": []}, "runs_in.how must be one of built, given, same, failed"),
        ({"how": "built", "changed": "a list"}, "runs_in.changed must be a list of file names"),
        ({"how": "built", "changed": [], "seconds": "3"}, "runs_in.seconds must be a number"),
        ({"how": "built", "changed": [], "cached": "yes"}, "runs_in.cached must be true or"),
        ({"how": "given", "changed": [], "python": 3}, "runs_in.python must be text"),
    ],
)
def test_a_record_whose_base_environment_is_not_as_written_is_refused(
    runs_in: dict[str, object], said: str
) -> None:
    from perfguard.records import RecordError
    from perfguard.records.runs import BaselineRef

    with pytest.raises(RecordError, match=said):
        BaselineRef(commit=None, reason="r", mode="ab", runs_in=runs_in)
    assert BaselineRef(commit=None, reason="r", runs_in={"how": "same", "changed": []}).runs_in


def test_an_environment_path_that_holds_no_python_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    for option in ("--perfguard-base-env=bogus", "--perfguard-ab-env=/nowhere"):
        result = pytester.runpytest_subprocess("--perfguard", option, "-p", "no:cacheprovider")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*{option}: no Python interpreter there*"])
