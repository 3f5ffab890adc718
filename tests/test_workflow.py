"""The shipped workflow: write tokens only where no pull-request code runs.

actionlint and zizmor (`make lint`) check the syntax and the known traps; these tests pin the
design decisions that no linter knows about.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import actions_graph

WORKFLOW = Path(__file__).resolve().parent.parent / ".github" / "workflows" / "perfguard.yml"
RUNS_CODE = re.compile(r"pip install[^\n]* \.(\[|\s|$)|pytest|perfguard merge")
TRUSTED = "${{ github.event.pull_request.base.sha || github.sha }}"  # never the PR's code


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def _writes(job: dict[str, Any]) -> set[str]:
    perms = job.get("permissions") or {}
    return {scope for scope, level in perms.items() if level == "write"}


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(str(step.get("run", "")) for step in job.get("steps", []))


def _checkout_refs(job: dict[str, Any]) -> list[str]:
    return [
        str((step.get("with") or {}).get("ref", ""))
        for step in job.get("steps", [])
        if str(step.get("uses", "")).startswith("actions/checkout@")
    ]


def test_the_workflow_grants_nothing_by_default(workflow: dict[Any, Any]) -> None:
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        assert "permissions" in job, f"job {name} must say its permissions"


def test_jobs_that_run_pr_code_hold_no_write_token(workflow: dict[Any, Any]) -> None:
    for name, job in workflow["jobs"].items():
        only_main = "github.event_name == 'push'" in str(job.get("if", ""))
        trusted = only_main or _checkout_refs(job) == [TRUSTED]
        if RUNS_CODE.search(_runs(job)) and _writes(job) and not trusted:
            raise AssertionError(f"job {name} runs the PR's code with {_writes(job)} write")
    # and the jobs that do run it are the measuring ones, read-only
    for name in ("measure", "compare"):
        assert RUNS_CODE.search(_runs(workflow["jobs"][name]))
        assert _writes(workflow["jobs"][name]) == set()


def test_the_comment_is_posted_by_a_job_that_reads_an_artifact_and_trusted_code(
    workflow: dict[Any, Any],
) -> None:
    writers = {n: j for n, j in workflow["jobs"].items() if "pull-requests" in _writes(j)}
    assert list(writers) == ["comment"]
    job = writers["comment"]
    assert _writes(job) == {"pull-requests"}
    assert re.search(r"pip install .*--no-deps \.", _runs(job))
    assert "pytest" not in _runs(job) and "-e ." not in _runs(job)
    assert _checkout_refs(job) == [TRUSTED]
    assert any("download-artifact" in str(s.get("uses", "")) for s in job["steps"])


def test_the_baselines_are_pushed_only_on_main_by_a_job_of_its_own(
    workflow: dict[Any, Any],
) -> None:
    writers = {n: j for n, j in workflow["jobs"].items() if "contents" in _writes(j)}
    assert list(writers) == ["baselines"]
    job = writers["baselines"]
    assert "github.event_name == 'push'" in str(job["if"])
    assert "perfguard baselines push" in _runs(job)


def test_the_git_credentials_never_outlive_their_step(workflow: dict[Any, Any]) -> None:
    text = WORKFLOW.read_text()
    assert "GITHUB_ENV" not in text
    for name, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            env = step.get("env") or {}
            if "github.token" in str(env):
                needs = r"perfguard (comment|alert|baselines (pull|push))|gh api|git fetch"
                assert re.search(needs, step["run"]), (
                    f"job {name}, step {step.get('name')}: a token for a step that does not "
                    "need one"
                )


def test_a_deliberate_run_is_pinned_to_the_reviewed_head_and_checked(
    workflow: dict[Any, Any],
) -> None:
    inputs = workflow[True]["workflow_dispatch"]["inputs"]  # yaml reads `on` as True
    assert {"pr", "sha", "calibrate"} <= set(inputs)
    config = _runs(workflow["jobs"]["config"])
    assert ".head.sha" in config and "SHA" in config
    # optional to GitHub (a calibration has none), required by the config job otherwise
    assert 'workflow_dispatch ] && [ "$CALIBRATE" != true ]' in config
    assert "^[0-9a-f]{40}$" in config and "^[0-9]+$" in config
    for name in ("measure", "compare"):
        job = workflow["jobs"][name]
        assert _checkout_refs(job) == ["${{ needs.config.outputs.ref }}"]
        assert 'git rev-parse HEAD)" != "$SHA"' in _runs(job), name


def test_mains_history_alert_and_site_run_on_main_only_with_their_own_permissions(
    workflow: dict[Any, Any],
) -> None:
    jobs = workflow["jobs"]
    history = jobs["history"]
    assert "github.event_name == 'push'" in str(history["if"])
    assert history["permissions"] == {"contents": "read", "issues": "write"}
    runs = _runs(history)
    for command in ("perfguard history", "perfguard alert", "perfguard site"):
        assert command in runs
    assert "pytest" not in runs and "torch" not in runs  # no GPU, no model code
    writers = {n for n, j in jobs.items() if "issues" in _writes(j)}
    assert writers == {"history"}
    pages = jobs["pages"]
    assert pages["needs"] == "history"  # and so main only
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert all("run" not in step for step in pages["steps"])


def test_a_pull_request_fetches_its_bases_record_alone(workflow: dict[Any, Any]) -> None:
    """Measured beside its base, a PR needs the base's record (context) and no history: the
    summary parts are fetched where main compares with the stored baseline."""
    jobs = workflow["jobs"]
    pulls = {
        name: [s for s in jobs[name]["steps"] if "baselines pull" in str(s.get("run", ""))]
        for name in ("measure", "compare")
    }
    (measure,) = pulls["measure"]
    assert '--history "$HISTORY"' in measure["run"]
    assert measure["env"]["HISTORY"] == "${{ github.event_name == 'push' && '20' || '0' }}"
    (compare,) = pulls["compare"]
    assert compare["if"] == "github.event_name == 'push'"


def test_the_history_job_fetches_the_branch_of_a_private_repository(
    workflow: dict[Any, Any],
) -> None:
    """The checkout keeps no credentials, so the fetch carries the token itself, in git's
    environment for that one process (not in its arguments, which `ps` shows)."""
    (fetch,) = [
        s for s in workflow["jobs"]["history"]["steps"] if "git fetch" in str(s.get("run", ""))
    ]
    assert fetch["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert 'GIT_CONFIG_VALUE_0="AUTHORIZATION: basic $auth"' in fetch["run"]
    assert "git -c" not in fetch["run"] and "GITHUB_ENV" not in fetch["run"]


def _rendered(store: str | None) -> dict[Any, Any]:
    from perfguard.init import InitOptions, render_workflow

    doc: dict[Any, Any] = yaml.safe_load(
        render_workflow(InitOptions(store=store, vendored=True), Path(__file__).parent)
    )
    return doc


PUBLISHED = WORKFLOW.parent
GRAPHS: dict[str, Callable[[], dict[Any, Any]]] = {
    "shipped": lambda: yaml.safe_load(WORKFLOW.read_text()),
    "init --vendored": lambda: _rendered(None),
    "init --vendored --store s3": lambda: _rendered("s3://bucket/perf"),
    # what a team's caller runs: the reusable workflows this repository publishes
    "reusable": lambda: yaml.safe_load((PUBLISHED / "reusable.yml").read_text()),
    "reusable-s3": lambda: yaml.safe_load((PUBLISHED / "reusable-s3.yml").read_text()),
}
STORES = {"init --vendored --store s3", "reusable-s3"}
FAIL = {
    "Fail the check on a regression, an incomplete run or broken input": actions_graph.Step(
        fails=True
    )
}
"""The step that fails the check: it runs `exit 1` whenever its condition lets it run."""
MEASURE = {"config": actions_graph.Step(outputs={"task": "measure"})}
"""The config job's word on a push or a pull request: measure (the calibration runs alone)."""
OUTCOMES = {
    # the merge step's exit status, and whether it wrote main's record
    "clean": actions_graph.Step(outputs={"status": "0", "saved": "true"}),
    "regression": actions_graph.Step(outputs={"status": "1", "saved": "true"}),
    "incomplete": actions_graph.Step(outputs={"status": "1", "saved": "true"}),
    "merge failed": actions_graph.Step(outputs={"status": "2"}),
}


@pytest.mark.parametrize("graph", list(GRAPHS))
@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_main_stores_and_alerts_every_commit_it_measured_whatever_the_verdict(
    graph: str, outcome: str
) -> None:
    """A regression that lands on main, a deleted test or a parent that did not import (an
    incomplete run) is stored in main's record and reaches the alert, and the check is red;
    a merge that failed stores nothing (it wrote nothing) and is red."""
    jobs = actions_graph.play(
        GRAPHS[graph](), event="push", steps={"compare": OUTCOMES[outcome], **FAIL, **MEASURE}
    )
    assert jobs["compare"].result == ("success" if outcome == "clean" else "failure")
    stored = outcome != "merge failed"
    assert jobs["compare"].outputs["saved"] == ("true" if stored else "")
    assert jobs["baselines"].result == ("success" if stored else "skipped")
    assert jobs["history"].result == ("success" if stored else "skipped")  # the alert's job
    assert jobs["pages"].result == ("success" if stored else "skipped")
    if graph not in STORES:  # the record's artifact, which the baselines job pushes
        uploads = [s for s in jobs["compare"].steps if s.startswith("actions/upload-artifact")]
        assert len(uploads) == (2 if stored else 1)  # the report's, and the record's
    assert jobs["comment"].result == "skipped"  # no pull request


@pytest.mark.parametrize("graph", list(GRAPHS))
@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_a_pull_request_is_commented_and_red_unless_clean_and_stores_nothing(
    graph: str, outcome: str
) -> None:
    step = OUTCOMES[outcome]
    pr_step = actions_graph.Step(outputs={"status": step.outputs["status"]})
    jobs = actions_graph.play(
        GRAPHS[graph](), event="pull_request", steps={"compare": pr_step, **FAIL, **MEASURE}
    )
    assert jobs["compare"].result == ("success" if outcome == "clean" else "failure")
    assert jobs["comment"].result == "success"  # posted even when the check is red
    for job in ("baselines", "history", "pages"):
        assert jobs[job].result == "skipped"
    assert jobs["fork-gate"].result == "skipped"


DOWNLOAD = "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093"


def test_a_missing_shard_stops_the_compare_and_stores_nothing() -> None:
    jobs = actions_graph.play(
        GRAPHS["shipped"](),
        event="push",
        jobs={"measure": "failure"},
        steps={DOWNLOAD: actions_graph.Step(fails=True), **MEASURE},
    )
    assert jobs["compare"].result == "failure" and jobs["baselines"].result == "skipped"


@pytest.mark.parametrize("graph", list(GRAPHS))
def test_a_job_that_uploads_reports_forgets_the_ones_the_change_committed_first(graph: str) -> None:
    """An upload runs `if: always()`: were a step before the report's to fail, a report the
    pull request committed would be uploaded, and posted, as perfguard's."""
    jobs = GRAPHS[graph]()["jobs"]
    for name in ("measure", "compare"):
        steps = [str(s.get("name") or s.get("uses")) for s in jobs[name]["steps"]]
        forget = steps.index("Forget reports the pull request committed")
        checkout = max(i for i, s in enumerate(steps) if s.startswith("actions/checkout@"))
        assert forget == checkout + 2 or forget == checkout + 1, steps  # right after it
        assert all("upload-artifact" not in s for s in steps[:forget])


@pytest.mark.parametrize("graph", list(GRAPHS))
@pytest.mark.parametrize("missed", [False, True])
def test_the_weekly_calibration_runs_alone_and_fails_when_a_canary_was_missed(
    graph: str, missed: bool
) -> None:
    """On the schedule (and on demand) only the calibration runs: nothing is measured for a
    pull request, stored, alerted or commented; the job is red when `perfguard calibrate`
    exits 1 (a canary at or above an item's bar never caught), and its table still reaches
    the job summary and the artifact."""
    calibrate = {"config": actions_graph.Step(outputs={"task": "calibrate"})}
    if missed:
        calibrate["Calibrate"] = actions_graph.Step(fails=True)
    jobs = actions_graph.play(GRAPHS[graph](), event="schedule", steps=calibrate)
    assert jobs["calibrate"].result == ("failure" if missed else "success")
    ran = jobs["calibrate"].steps
    assert "The table in the job summary" in ran
    assert any(s.startswith("actions/upload-artifact") for s in ran)
    for job in ("measure", "compare", "comment", "baselines", "history", "pages", "fork-gate"):
        assert jobs[job].result == "skipped", job
    doc = GRAPHS[graph]()
    assert doc["jobs"]["calibrate"]["permissions"] == {"contents": "read"}
    if "workflow_call" not in doc[True]:  # `on:` reads as True in YAML 1.1
        assert "schedule" in doc[True]  # (a reusable workflow: its caller's schedule)
    pushed = actions_graph.play(doc, event="push", steps=MEASURE)
    assert pushed["calibrate"].result == "skipped"


FAKE_PERFGUARD = """#!/usr/bin/env bash
# merge: writes the run and exits as the run says ($MERGE_EXIT); 2 writes nothing
case "$1" in
  merge)
    out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
    if [ "$MERGE_EXIT" != 2 ]; then echo '{}' > "$out"; fi
    echo "merge said: exit $MERGE_EXIT" >&2
    exit "$MERGE_EXIT";;
  report)
    out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
    echo "## perfguard: incomplete run" > "$out"; exit 1;;
esac
"""


@pytest.mark.parametrize("exit_code", [0, 1, 2])
def test_an_incomplete_or_unmerged_pull_request_still_writes_its_report(
    tmp_path: Path, exit_code: int
) -> None:
    """The comment is updated on every push: a merge that found the run incomplete (exit 1)
    or could not merge it (exit 2) still leaves a report, and the status says it failed."""
    from importlib import resources

    script = resources.files("perfguard.init").joinpath("scripts", "merge.sh").read_text()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "perfguard").write_text(FAKE_PERFGUARD)
    (bin_dir / "perfguard").chmod(0o755)
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "shard-1.json").write_text("{}")
    output = tmp_path / "github-output"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GITHUB_EVENT_NAME": "pull_request",
        "PR_MODE": "ab",
        "GITHUB_OUTPUT": str(output),
        "MERGE_EXIT": str(exit_code),
    }
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    report = (tmp_path / "reports" / "perfguard.md").read_text()
    said = dict(line.split("=", 1) for line in output.read_text().split())
    if exit_code == 2:
        assert "could not be compared" in report and "merge said: exit 2" in report
        assert said["status"] == "2"
    else:
        assert "incomplete run" in report
        assert said["status"] == "1"  # the report's own verdict, where the merge passed
