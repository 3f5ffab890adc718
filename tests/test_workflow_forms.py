"""The workflow's forms: the reusable workflows and actions this repository publishes, the
short caller `perfguard init` writes, and the vendored copy, from one template."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from perfguard.cli import main
from perfguard.init import InitOptions, _template, forms, pinned, render_reusable, render_workflow
from perfguard.version import __version__
from tests.gitrepo import git

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import workflows as published_files  # noqa: E402


def _doc(text: str) -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(text)
    return doc


@pytest.mark.parametrize("store", [False, True])
def test_the_reusable_workflow_has_the_vendored_copys_jobs(store: bool) -> None:
    """One job graph: the reusable workflow is the vendored template with each value an
    input's expression, and nothing in `jobs:` differs."""
    reusable_text = render_reusable(store)
    vendored_text = forms.workflow(
        _template,
        forms.reusable_values(store),
        reusable=False,
        ab=True,
        version=__version__,
        pin=pinned,
    )

    def after(text: str, mark: str) -> str:
        return text.split(mark, 1)[1]

    assert after(reusable_text, "\nenv:\n") == after(vendored_text, "\nenv:\n")  # text-equal
    reusable = _doc(reusable_text)
    # and the team's own vendored copy has the same jobs, needs, conditions and permissions
    mine = _doc(
        render_workflow(InitOptions(vendored=True, store="s3://perf/base" if store else None), ROOT)
    )
    assert list(mine["jobs"]) == list(reusable["jobs"])
    for name, job in reusable["jobs"].items():
        for key in ("needs", "if", "permissions", "outputs"):
            assert mine["jobs"][name].get(key) == job.get(key), (name, key)


@pytest.mark.parametrize("store", [False, True])
def test_every_input_the_reusable_workflow_reads_is_declared_and_every_secret_passed(
    store: bool,
) -> None:
    text = render_reusable(store)
    call = _doc(text)[True]["workflow_call"]
    used = set(re.findall(r"(?<!event\.)inputs\.([\w-]+)", text))
    assert used <= set(call["inputs"]), used - set(call["inputs"])
    assert set(call["inputs"]) <= used | {"store"}, set(call["inputs"]) - used
    secrets = set(re.findall(r"secrets\.(\w+)", text))
    assert secrets == (set(call.get("secrets") or {}) if store else set())
    assert "secrets: inherit" not in text


def _caller(**options: Any) -> str:
    return render_workflow(InitOptions(**options), ROOT)


CALLERS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "stored": {"ab": False},
    "store": {"store": "s3://perf-bucket/baselines"},
    "store, 8 H100s": {
        "store": "s3://perf-bucket/baselines",
        "shards": 8,
        "labels": ("self-hosted", "h100"),
        "tests": "benchmarks/perf",
    },
}


@pytest.mark.parametrize("name", list(CALLERS))
def test_the_caller_is_short_grants_what_the_called_jobs_use_and_passes_its_inputs(
    name: str,
) -> None:
    options = CALLERS[name]
    text = _caller(**options)
    assert len(text.splitlines()) <= forms.CALLER_LINES, text
    doc = _doc(text)
    (job,) = doc["jobs"].values()
    store = "store" in options
    called = _doc((ROOT / ".github/workflows" / forms.REUSABLE[store]).read_text())
    assert job["uses"].split("@")[0].endswith(forms.REUSABLE[store])
    needed: dict[str, str] = {}
    for spec in called["jobs"].values():
        for scope, level in (spec.get("permissions") or {}).items():
            if needed.get(scope) != "write":
                needed[scope] = level
    assert job["permissions"] == needed  # each scope at the most a called job uses
    declared = called[True]["workflow_call"]["inputs"]
    assert set(job.get("with") or {}) <= set(declared)
    for key, value in (job.get("with") or {}).items():
        assert str(value) != str(declared[key].get("default")), f"{key} is the default"
    assert set(job.get("secrets") or {}) == set(called[True]["workflow_call"].get("secrets") or {})
    assert doc[True]["push"]["branches"] == ["main"]
    assert set(doc[True]) == {"pull_request", "push", "schedule", "workflow_dispatch"}


def test_a_release_build_pins_its_commit_and_a_checkout_its_tag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tagged = _caller()
    assert f"reusable.yml@v{__version__} # zizmor: ignore[unpinned-uses]" in tagged
    commit = "ab" * 20
    release = types.ModuleType("perfguard.init.release")
    release.COMMIT = commit  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "perfguard.init.release", release)
    text = _caller()
    assert f"reusable.yml@{commit} # v{__version__}\n" in text and "zizmor" not in text
    assert forms.pinned_release(text) == {
        "repo": "perfguard/perfguard",
        "file": "reusable.yml",
        "ref": commit,
        "tag": f"v{__version__}",
    }


@pytest.mark.slow
def test_a_caller_pinned_to_a_commit_passes_zizmor_and_actionlint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_init import _linted

    release = types.ModuleType("perfguard.init.release")
    release.COMMIT = "cd" * 20  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "perfguard.init.release", release)
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    for name, options in CALLERS.items():
        (folder / f"{name.replace(', ', '-').replace(' ', '-')}.yml").write_text(_caller(**options))
    _linted(folder)


def test_init_check_names_a_workflow_of_another_release_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--check"]) == 1
    assert "no perfguard workflow here" in capsys.readouterr().err
    assert main(["init"]) == 0 and main(["init", "--check"]) == 0
    workflow = tmp_path / ".github/workflows/perfguard.yml"
    workflow.write_text(workflow.read_text().replace(f"@v{__version__}", "@v0.0.9"))
    capsys.readouterr()
    assert main(["init", "--check"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"calls perfguard's workflow at v0.0.9, but perfguard {__version__} is installed" in err
    assert main(["init", "--vendored", "--force"]) == 0 and main(["init", "--check"]) == 0
    workflow.write_text(workflow.read_text().replace(f"=={__version__}", "==0.0.9"))
    capsys.readouterr()
    assert main(["init", "--check"]) == 1
    assert "a vendored copy installing perfguard 0.0.9" in capsys.readouterr().err


def test_the_command_names_the_repository_forms_calls() -> None:
    from perfguard.cli import init as command

    assert command.REPOSITORY == forms.REPOSITORY  # kept twice: the command imports no jinja2


def test_the_published_workflows_and_actions_are_fresh() -> None:
    """What a release's commit holds is what this perfguard renders (`make workflows`)."""
    for path, text in published_files.published().items():
        assert path.is_file(), f"{path} is missing: make workflows"
        assert published_files.same(path.read_text(), text), f"{path} is stale: make workflows"


def test_the_actions_run_the_workflows_own_scripts() -> None:
    """One source for the shell: the measure and report actions run the steps the reusable
    workflow runs, with the same names in their environment."""
    jobs = _doc(render_reusable(False))["jobs"]

    def run_of(job: str, prefix: str) -> str:
        (step,) = [s for s in jobs[job]["steps"] if str(s.get("name", "")).startswith(prefix)]
        return str(step["run"])

    for name, job, step_name in (("measure", "measure", "Measure"), ("report", "compare", "Merge")):
        action = _doc((ROOT / "actions" / name / "action.yml").read_text())
        (step,) = action["runs"]["steps"]
        assert action["runs"]["using"] == "composite" and step["shell"] == "bash"
        assert step["run"] == run_of(job, step_name)
        for var in set(re.findall(r"\$\{?([A-Z_]+)", step["run"])) - {"GITHUB_OUTPUT", "AB"}:
            if var in ("GITHUB_EVENT_NAME", "SAVE", "status", "extra"):
                continue
            assert var in step["env"], (name, var)
    comment = _doc((ROOT / "actions" / "comment" / "action.yml").read_text())
    assert "perfguard comment" in comment["runs"]["steps"][0]["run"]
