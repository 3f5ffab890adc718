"""`perfguard init`: put perfguard into a repository in one step.

Writes the GitHub workflow (a short caller of perfguard's reusable workflow, pinned to this
release; with `vendored`, the whole workflow), an example perf test beside the project's
tests, and the pytest settings, then says what to do next. A file that exists is never
replaced without `force`; settings are added to an existing pytest configuration only where
they are missing. The forms of the workflow: `perfguard.init.forms`.
"""

from __future__ import annotations

import configparser
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from perfguard.errors import PerfguardError
from perfguard.init import forms
from perfguard.version import __version__

WORKFLOW = Path(".github/workflows/perfguard.yml")
DEFAULT_LABELS = ("self-hosted", "linux", "x64", "gpu")
SETTINGS = {"perfguard_variants": "eager,compile-default", "perfguard_main_branch": "main"}
IGNORED = ("baselines/", "reports/")


class InitError(PerfguardError):
    """Init cannot go on; nothing was written. The message says why and what to do."""


@dataclass(frozen=True)
class InitOptions:
    tests: str = "tests/perf"  # where the perf tests live (the example goes there)
    labels: tuple[str, ...] = DEFAULT_LABELS  # the GPU runners' labels
    shards: int = 2  # GPU runners that share the suite
    ab: bool = True  # pull requests: measure beside the base commit (same-job A/B)
    main_branch: str = "main"
    force: bool = False  # replace files that exist
    store: str | None = None  # an object store's URL (s3://bucket/prefix) instead of a branch
    vendored: bool = False  # the whole workflow, not a caller of the reusable one
    repository: str = forms.REPOSITORY  # where the reusable workflow is (a mirror's name)


@dataclass
class Written:
    created: list[Path] = field(default_factory=list)
    replaced: list[Path] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # "file: what was added"
    kept: list[str] = field(default_factory=list)  # "file: why it was left alone"


def _template(name: str) -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("perfguard.init", "templates"),
        # GitHub's own ${{ }} expressions stay as they are
        variable_start_string="{=",
        variable_end_string="=}",
        keep_trailing_newline=True,
        autoescape=False,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template(name)


def _project_install(root: Path) -> str | None:
    """How the workflow installs the user's own project, when it can tell."""
    if (root / "pyproject.toml").is_file() or (root / "setup.py").is_file():
        return "-e ."
    if (root / "requirements.txt").is_file():
        return "-r requirements.txt"
    return None


MAX_SHARDS = 256
"""GitHub runs at most 256 jobs of one matrix."""


def _shown_store(store: str) -> str:
    """A store URL as a message may show it: credentials in it are never echoed."""
    return re.sub(r"^(s3://)[^/@]*@", r"\1***@", store)


def _check(options: InitOptions) -> None:
    if not 1 <= options.shards <= MAX_SHARDS:
        raise InitError(
            f"--shards must be 1 to {MAX_SHARDS} (GitHub runs at most {MAX_SHARDS} jobs of a "
            f"matrix), got {options.shards}"
        )
    if not options.labels or any(not re.fullmatch(r"[A-Za-z0-9_.-]+", x) for x in options.labels):
        raise InitError(f"--runner-labels must be names like gpu,linux, got {options.labels!r}")
    tests = Path(options.tests)
    if tests.is_absolute() or ".." in tests.parts or not re.fullmatch(r"[\w./-]+", options.tests):
        raise InitError(f"--tests must be a folder inside the repository, got {options.tests!r}")
    if options.store is not None and not re.fullmatch(
        r"s3://[a-z0-9][a-z0-9.-]{1,62}(/[\w./-]*)?", options.store
    ):
        raise InitError(
            "--store must be an s3://bucket/prefix URL (credentials come from the runner's "
            f"environment, never the URL), got {_shown_store(options.store)!r}"
        )
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", options.repository):
        raise InitError(f"--workflow-repo must be OWNER/NAME, got {options.repository!r}")
    branch = options.main_branch
    if (
        not re.fullmatch(r"[\w./-]+", branch)
        or branch.startswith(("refs/", "/", "-"))
        or branch.endswith(("/", ".", ".lock"))
        or ".." in branch
        or "//" in branch
    ):
        raise InitError(
            f"--main-branch must be a branch's name as GitHub shows it (main, not "
            f"refs/heads/main), got {branch!r}"
        )


def pinned(names: str) -> str:
    """`names` (space-separated packages) each pinned to the version installed here, as the
    jobs that hold a write token install them: a package released tomorrow must not run with
    that token unreviewed. A package not installed here stays unpinned."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in names.split():
        try:
            out.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            out.append(name)
    return " ".join(out)


def release_commit() -> str | None:
    """The commit this perfguard was released from (written into a release build), or None."""
    try:
        from perfguard.init import release  # type: ignore[attr-defined]
    except ImportError:
        return None
    commit = getattr(release, "COMMIT", None)
    return commit if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit) else None


def _values(options: InitOptions, root: Path) -> forms.Values:
    return forms.vendored_values(
        tests=options.tests,
        ab=options.ab,
        main_branch=options.main_branch,
        project_install=_project_install(root),
        labels=options.labels,
        shards=options.shards,
        store=options.store,
    )


def render_workflow(options: InitOptions, root: Path) -> str:
    """The workflow `init` writes: the caller, or with `vendored` the whole workflow."""
    _check(options)
    values = _values(options, root)
    if options.vendored:
        return forms.workflow(
            _template, values, reusable=False, ab=options.ab, version=__version__, pin=pinned
        )
    return forms.caller(
        _template,
        values=values,
        labels=options.labels,
        shards=options.shards,
        ab=options.ab,
        store=options.store,
        project_install=_project_install(root),
        version=__version__,
        commit=release_commit(),
        repository=options.repository,
    )


def render_reusable(store: bool) -> str:
    """The reusable workflow (`on: workflow_call`) for baselines in a store or on a branch."""
    values = forms.reusable_values(store)
    return forms.workflow(
        _template, values, reusable=True, ab=True, version=__version__, pin=pinned
    )


def check(root: Path) -> str | None:
    """One line naming how the repository's workflow differs from this release, or None."""
    return forms.mismatch(root / WORKFLOW, __version__, release_commit())


def init(root: Path, options: InitOptions) -> Written:
    """Write the workflow, the example test and the settings into the repository at `root`."""
    _check(options)
    files = {
        root / WORKFLOW: render_workflow(options, root),
        root / options.tests / "test_perf_example.py": _template("test_perf_example.py.j2").render(
            tests=options.tests
        ),
    }
    example = root / options.tests / "test_perf_example.py"
    _inside(root, files)
    existing = [p for p in files if p.exists()]
    if existing and not options.force:
        names = ", ".join(str(p.relative_to(root)) for p in existing)
        raise InitError(
            f"{names} already exist{'s' if len(existing) == 1 else ''}: nothing was "
            "written (run again with --force to replace)"
        )
    done = Written()
    _readable_settings(root)
    for path, text in files.items():
        if path == example and path.exists():  # the user's to change: --force upgrades the rest
            if path.read_bytes() != text.encode("utf-8"):
                done.kept.append(f"{path.relative_to(root)}: yours (changed), left as it is")
            continue
        (done.replaced if path.exists() else done.created).append(path.relative_to(root))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    _add_settings(root, {**SETTINGS, "perfguard_main_branch": options.main_branch}, done)
    _add_ignored(root, done)
    return done


def _inside(root: Path, files: dict[Path, str]) -> None:
    """Every file init writes stays inside the repository: a link out of it is refused."""
    top = root.resolve()
    for path in [*files, root / "pytest.ini", root / "pyproject.toml", root / ".gitignore"]:
        target = path.resolve() if path.exists() or path.is_symlink() else path.parent.resolve()
        try:
            target.relative_to(top)
        except ValueError:
            raise InitError(
                f"{path.relative_to(root)} leads out of the repository ({target}): nothing was "
                "written (replace the link with a file)"
            ) from None


def _readable_settings(root: Path) -> None:
    """The configuration files init adds settings to read as text and as their format
    (a broken or non-UTF-8 one is the user's to mend: nothing is written)."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    for name in ("pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", ".gitignore"):
        path = root / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InitError(f"{name} is not UTF-8 text: nothing was written") from None
        if name == "pyproject.toml":
            try:
                doc = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise InitError(
                    f"pyproject.toml does not parse ({exc}): nothing was written"
                ) from None
            table = doc.get("tool", {}).get("pytest", {}).get("ini_options")
            header = re.search(r"^\[tool\.pytest\.ini_options\][ \t]*(#.*)?$", text, flags=re.M)
            if table is not None and header is None:
                raise InitError(
                    "pyproject.toml holds [tool.pytest.ini_options] in a form init does not "
                    f"edit: add {', '.join(SETTINGS)} there yourself; nothing was written"
                )


def _add_settings(root: Path, settings: dict[str, str], done: Written) -> None:
    """Add the perfguard_* keys to the pytest configuration pytest would read here, only those
    it lacks; with none, to pyproject.toml when there is one, else a new pytest.ini."""
    ini = root / "pytest.ini"
    pyproject = root / "pyproject.toml"
    for candidate, section in ((ini, "pytest"), (root / "tox.ini", "pytest"),
                               (root / "setup.cfg", "tool:pytest")):  # fmt: skip
        if candidate.is_file():
            parser = configparser.ConfigParser(interpolation=None)
            try:
                parser.read(candidate, encoding="utf-8")
            except configparser.Error as exc:
                raise InitError(
                    f"{candidate.name}: cannot be read ({exc}); nothing added"
                ) from None
            if parser.has_section(section) or candidate == ini:
                have = set(parser[section]) if parser.has_section(section) else set()
                _insert_after_header(candidate, f"[{section}]", settings, have, done, " = ")
                return
    if pyproject.is_file():
        text = pyproject.read_text(encoding="utf-8")
        header = "[tool.pytest.ini_options]"
        have = set(re.findall(r"^(perfguard_\w+)\s*=", text, flags=re.M))
        quoted = {k: json.dumps(v) for k, v in settings.items()}
        _insert_after_header(pyproject, header, quoted, have, done, " = ")
        return
    ini.write_text("[pytest]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
    done.created.append(Path("pytest.ini"))


def _insert_after_header(
    path: Path, header: str, settings: dict[str, str], have: set[str], done: Written, sep: str
) -> None:
    missing = {k: v for k, v in settings.items() if k not in have}
    if not missing:
        done.kept.append(f"{path.name}: already has the perfguard settings")
        return
    lines = "".join(f"{k}{sep}{v}\n" for k, v in missing.items())
    text = path.read_text(encoding="utf-8")
    at = re.search(rf"^{re.escape(header)}[ \t]*(#[^\n]*)?\n", text, flags=re.M)
    if at is None:
        text = text + ("" if text.endswith("\n") or not text else "\n") + f"\n{header}\n{lines}"
    else:
        text = text[: at.end()] + lines + text[at.end() :]
    path.write_text(text, encoding="utf-8")
    done.updated.append(f"{path.name}: added {', '.join(missing)}")


def _add_ignored(root: Path, done: Written) -> None:
    path = root / ".gitignore"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    have = {line.strip() for line in text.splitlines()}
    missing = [entry for entry in IGNORED if entry not in have and entry.rstrip("/") not in have]
    if not missing:
        return
    prefix = "" if not text or text.endswith("\n") else "\n"
    path.write_text(text + prefix + "".join(f"{m}\n" for m in missing), encoding="utf-8")
    done.updated.append(f".gitignore: added {', '.join(missing)}")


def next_steps(options: InitOptions) -> list[str]:
    return [
        f"1. Measure here: pytest {options.tests} --perfguard   (the report: reports/perfguard.md)",
        "2. Register a GPU machine as a self-hosted runner with the labels "
        f"{','.join(options.labels)} (see perfguard's docs/runner-setup.md)",
        f"3. Commit and push to {options.main_branch}: its run stores the first baseline, and "
        "every pull request after that gets one perfguard comment",
    ]
