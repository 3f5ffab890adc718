"""The workflow's forms, from one template: the full copy a team keeps (`init --vendored`),
the reusable workflows this repository publishes (`on: workflow_call`), the short caller that
`perfguard init` writes, and the composite actions.

One template (`templates/perfguard.yml.j2`) holds the job graph. The vendored copy renders it
with the team's values written in; a reusable workflow renders the same jobs with each value
an input's expression (`${{ inputs.tests }}`), so the two differ only above `jobs:`, which a
test holds. Where the baselines live changes jobs and their permissions (a branch needs
`contents: write`; an object store needs none), so there are two reusable workflows, one per
store; everything else is an input. The shell of the measuring and merging steps is in
`scripts/` and is shared by the workflow and the actions alike.

A caller is pinned to the release of the perfguard that wrote it: the release's commit
(zizmor's rule for a workflow of another repository), with its tag in a comment, where this
perfguard is a release build (`release.py`, written by `tools/release.py` when it builds);
elsewhere to the tag, said so in the file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

REPOSITORY = "perfguard/perfguard"
"""Where perfguard's releases are tagged: the repository whose workflows a caller calls."""
REUSABLE = {False: "reusable.yml", True: "reusable-s3.yml"}
"""The reusable workflow for baselines on a branch (False) or in an object store (True), in
`.github/workflows/` of `REPOSITORY`."""
ACTIONS = ("measure", "report", "comment")
"""The composite actions, each `actions/<name>/action.yml` in `REPOSITORY`."""
CALLER_LINES = 30
"""The most lines a caller may have."""
PIN = re.compile(
    r"uses:\s*(?P<repo>[\w.-]+/[\w.-]+)/\.github/workflows/(?P<file>reusable(?:-s3)?\.yml)"
    r"@(?P<ref>\S+)(?:\s*#\s*(?P<tag>v[\w.+-]+))?"
)
"""A caller's `uses:` line: the repository, the workflow, the ref and the tag beside it."""


def script(name: str) -> str:
    """A shell script of the workflow's steps (`scripts/<name>.sh`), without a final newline."""
    return resources.files("perfguard.init").joinpath("scripts", f"{name}.sh").read_text().strip()


@dataclass(frozen=True)
class Values:
    """What a rendering writes where the template names a value: the team's own (vendored)
    or an input's expression (reusable)."""

    tests: str
    pr_mode: str
    main_branch: str
    project_install: str
    packages: str
    pytest_args: str
    labels: str
    shards: str
    python: str
    store: str

    def render(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _quoted(value: str) -> str:
    """A YAML scalar for `value` (JSON's string is YAML's double-quoted one)."""
    return json.dumps(value)


def vendored_values(
    *,
    tests: str,
    ab: bool,
    main_branch: str,
    project_install: str | None,
    labels: tuple[str, ...],
    shards: int,
    store: str | None,
) -> Values:
    return Values(
        tests=tests,
        pr_mode="ab" if ab else "stored",
        main_branch=main_branch,
        project_install=_quoted(project_install or ""),
        packages='""',
        pytest_args='""',
        labels=f"'{json.dumps(list(labels))}'",
        shards=_quoted(str(shards)),
        python="3.12",
        store=(store or "").rstrip("/"),
    )


def reusable_values(store: bool) -> Values:
    """Every value an input of the reusable workflow."""

    def given(name: str) -> str:
        return "${{ inputs." + name + " }}"

    return Values(
        tests=given("tests"),
        pr_mode=given("pr-mode"),
        main_branch=given("main-branch"),
        project_install=given("project-install"),
        packages=given("packages"),
        pytest_args=given("pytest-args"),
        labels=given("runner-labels"),
        shards=given("shards"),
        python=given("python-version"),
        store=given("store") if store else "",
    )


def workflow(
    template: Callable[[str], Any],
    values: Values,
    *,
    reusable: bool,
    ab: bool,
    version: str,
    pin: Callable[[str], str],
) -> str:
    """The workflow template rendered: `reusable` picks the header (`on: workflow_call` and its
    inputs); the jobs are the same for both."""
    return str(
        template("perfguard.yml.j2").render(
            **values.render(),
            reusable=reusable,
            ab=ab,
            version=version,
            pin=pin,
            measure_script=script("measure"),
            merge_script=script("merge"),
        )
    )


def action(template: Callable[[str], Any], name: str, version: str) -> str:
    """The composite action `name` (`actions/<name>/action.yml`)."""
    return str(
        template(f"action-{name}.yml.j2").render(
            version=version, measure_script=script("measure"), merge_script=script("merge")
        )
    )


def caller(
    template: Callable[[str], Any],
    *,
    values: Values,
    labels: tuple[str, ...],
    shards: int,
    ab: bool,
    store: str | None,
    project_install: str | None,
    version: str,
    commit: str | None,
    repository: str = REPOSITORY,
) -> str:
    """The short workflow a team keeps: the triggers, the permissions the called jobs use and
    the inputs that differ from the reusable workflow's defaults."""
    inputs: dict[str, str] = {} if values.tests == "tests/perf" else {"tests": values.tests}
    if labels != ("self-hosted", "linux", "x64", "gpu"):
        inputs["runner-labels"] = f"'{json.dumps(list(labels))}'"
    if shards != 2:
        inputs["shards"] = str(shards)
    if not ab:
        inputs["pr-mode"] = "stored"
    if store:
        inputs["store"] = store.rstrip("/")
    if values.main_branch != "main":
        inputs["main-branch"] = values.main_branch
    if (project_install or "") != "-e .":
        inputs["project-install"] = _quoted(project_install or "")
    text = template("caller.yml.j2").render(
        repository=repository,
        file=REUSABLE[bool(store)],
        ref=commit or f"v{version}",
        tag=f"v{version}",
        pinned=commit is not None,
        main_branch=values.main_branch,
        store=bool(store),
        inputs=inputs,
    )
    return str(text).rstrip() + "\n"


def pinned_release(text: str) -> Mapping[str, str] | None:
    """The caller's pin (`repo`, `file`, `ref`, `tag`), or None when `text` calls none."""
    found = PIN.search(text)
    return None if found is None else {k: v or "" for k, v in found.groupdict().items()}


def vendored_version(text: str) -> str | None:
    """The perfguard version a vendored workflow installs (`perfguard[...]==X`)."""
    found = re.search(r'"perfguard(?:\[[\w,]+\])?==([\w.+-]+)"', text)
    return None if found is None else found.group(1)


def mismatch(path: Path, version: str, commit: str | None) -> str | None:
    """One line naming how the workflow at `path` differs from this perfguard's release (its
    first pin that differs, of every call of perfguard's workflow), or None when it matches."""
    if not path.is_file():
        return f"{path}: no perfguard workflow here (run perfguard init)"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path}: cannot be read as text ({exc})"
    pins = [{k: v or "" for k, v in m.groupdict().items()} for m in PIN.finditer(text)]
    for pin in pins:
        tag = pin["tag"] or pin["ref"]
        if tag != f"v{version}":
            have = tag[1:] if re.fullmatch(r"v\d[\w.+-]*", tag) else f"the perfguard of {tag}"
            return (
                f"{path}: calls perfguard's workflow at {tag}, but perfguard {version} is "
                f"installed: pin v{version} (perfguard init --force) or install {have}"
            )
        if commit is not None and pin["ref"] not in (commit, f"v{version}"):
            return f"{path}: pins {pin['ref']}, not v{version}'s commit {commit}"
    if pins:
        return None
    found = vendored_version(text)
    if found is None:
        return f"{path}: neither calls perfguard's workflow nor installs a pinned perfguard"
    if found != version:
        return (
            f"{path}: a vendored copy installing perfguard {found}, but {version} is "
            f"installed: write it again (perfguard init --vendored --force) or install {found}"
        )
    return None
