"""Same-job A/B (`--perfguard-ab`) for the driving session: the base's worktree, the driver.

The driving session (the one the user started) checks the base revision out as a worktree
and, instead of calling each perf test itself, has the two workers run it (see
`perfguard.pytest_plugin.ab.driver` and the `AbDriving` and `AbWorker` roles).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.records import RecordError, VariantResult

if TYPE_CHECKING:
    from perfguard.environments import BaseEnvironment
    from perfguard.pytest_plugin.ab.driver import Driver, SideOutcome
    from perfguard.pytest_plugin.options import Options
    from perfguard.stats.thresholds import Thresholds
    from perfguard.worktree import Worktree


AB_REPEAT_FACTOR = 3
"""A/B splits the same budget into three times the blocks (2 s over 15: 0.13 s a block by
default): the paired test gains more from pairs than from long blocks, a burst of load on the
host spoils a smaller share of them, and six pairs, the first look, then take less time than
stored mode's five repeats (docs/method.md, "The PR configuration on a busy runner")."""


@dataclass
class AbSession:
    driver: Driver
    worktree: Worktree | ThisTree
    commit: str
    reason: str
    items: list[str]  # the perf items' node ids, in the order this session runs them
    base_results: list[VariantResult] = field(default_factory=list)
    base_environment: dict[str, Any] | None = None
    # where the base side runs (None: this environment, nothing decided)
    runs_in: BaseEnvironment | None = None

    def close(
        self, *, interrupted: bool = False, before_removal: Callable[[], None] | None = None
    ) -> None:
        """Stop the workers and remove the worktree (`before_removal` runs between)."""
        self.driver.close(at_once=interrupted)
        if before_removal is not None:
            before_removal()
        self.worktree.remove()


def worker_args(options: Options, rootdir: Path) -> list[str]:
    """The pytest command line of a worker: the measuring settings of this session."""
    return [
        *options.measuring_args(rootdir, AB_REPEAT_FACTOR * options.repeats),
        "--continue-on-collection-errors",
    ]


def session_paths(config: pytest.Config) -> list[str] | None:
    """The test paths this session collects, relative to its rootdir (as either tree's
    worker can be given them), or None when one lies outside the rootdir."""
    root = Path(config.rootpath).resolve()
    here = Path(config.invocation_params.dir)
    out = []
    for arg in config.args:
        path, sep, rest = arg.partition("::")
        try:
            inside = (here / path).resolve().relative_to(root)
        except (ValueError, OSError):
            return None
        out.append(f"{inside}{sep}{rest}")
    return out


class ThisTree:
    """Both sides in this tree (`perfguard calibrate`): no worktree to make or remove."""

    def __init__(self, root: Path) -> None:
        self.rootdir = root

    def remove(self) -> None:
        """Nothing to remove: the tree is the user's."""


def start(
    root: Path,
    options: Options,
    items: list[str] | None,
    paths: Sequence[str] = (),
    *,
    record: bool = False,
    same_tree: bool = False,
    say: Callable[[str], None] = lambda _line: None,
) -> AbSession:
    """Find REF, check it out, prepare the driver, launch the workers. A usage error says
    what went wrong. `items` None: this session has not collected yet; the workers collect
    `paths` (`session_paths`) meanwhile and are sent the items later. `record`: this tree's
    worker records what each test runs. `same_tree`: both sides are this tree
    (`perfguard calibrate`, or `--perfguard-ab-env`), no revision is checked out. `say`:
    progress (building the base's environment can take minutes)."""
    if same_tree or options.ab_env:
        return _start_same_tree(root, options, items, paths)
    from perfguard.git import GitError, ab_reference, resolve_commit
    from perfguard.pytest_plugin.ab.driver import Driver
    from perfguard.pytest_plugin.options import PARENT, trace_dir
    from perfguard.store.objects import open_store
    from perfguard.store.run_file import BaselineError
    from perfguard.worktree import Worktree

    ref = options.ab or "auto"
    try:
        if ref == "auto":
            machine = options.machine
            store = open_store(options.baseline_dir)
            choice = ab_reference(
                root,
                (lambda sha: store.has(machine, sha)) if machine else (lambda _sha: False),
                main_branch=options.main_branch,
                depth=options.baseline_depth,
            )
            if choice.commit is None:
                raise GitError(choice.reason)
            commit, reason = choice.commit, f"same-job A/B against {choice.reason}"
        elif ref == PARENT and options.save:
            commit = resolve_commit(root, ref)
            reason = (
                "same-job A/B against HEAD's first parent: main's run, whose paired change "
                "--perfguard-save stores"
            )
        else:
            commit = resolve_commit(root, ref)
            reason = f"same-job A/B against --perfguard-ab={ref} ({commit[:10]})"
        worktree = Worktree(root, commit)
    except (GitError, BaselineError) as exc:  # BaselineError: a store that cannot be listed
        raise pytest.UsageError(f"--perfguard-ab: {exc}") from None
    runs_in = _base_environment(root, options, commit, worktree, say)
    driver = Driver(
        worktree.rootdir,
        f"base {commit[:10]}",
        root,
        lambda rootdir: worker_args(options, rootdir),
        seed=options.seed,
        traces=trace_dir(options),
        record=record,
        orders=options.orders,
        cache="write" if options.save and options.compile_cache is not None else None,
        base_env=runs_in,
    )
    driver.launch_both(items, paths)  # they get ready while this session does
    return AbSession(driver, worktree, commit, reason, list(items or ()), runs_in=runs_in)


def _base_environment(
    root: Path, options: Options, commit: str, worktree: Worktree, say: Callable[[str], None]
) -> BaseEnvironment:
    """Where the base side runs (`--perfguard-base-env`, `perfguard.environments`)."""
    from perfguard.environments import EnvironmentChoiceError, base_environment, default_cache
    from perfguard.git import GitError, file_at
    from perfguard.selection import changed_files

    if options.base_env == "auto":
        try:
            changed = list(changed_files(root, commit).paths)
        except GitError:
            changed = []
    else:
        changed = []
    before: dict[str, str | None] = {}
    after: dict[str, str | None] = {}
    for path in changed:
        with contextlib.suppress(GitError, ValueError):
            before[path] = file_at(root, commit, root / path)
        try:
            after[path] = (root / path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            after[path] = None
    try:
        return base_environment(
            options.base_env,
            changed,
            before,
            after,
            worktree.rootdir,
            cache=options.env_cache or default_cache(),
            install=options.install,
            timeout_s=options.install_timeout_s,
            say=say,
        )
    except EnvironmentChoiceError as exc:
        worktree.remove()
        raise pytest.UsageError(str(exc)) from None


def _start_same_tree(
    root: Path, options: Options, items: list[str] | None, paths: Sequence[str]
) -> AbSession:
    from perfguard.git import GitError, resolve_commit
    from perfguard.pytest_plugin.ab.driver import Driver
    from perfguard.pytest_plugin.options import trace_dir

    try:
        commit = resolve_commit(root, "HEAD")
    except GitError:
        commit = ""  # not a git checkout: nothing names the tree but its folder
    runs_in, label, reason = None, "this tree (A)", "this tree beside itself"
    if options.ab_env:
        from perfguard.environments import BaseEnvironment, EnvironmentChoiceError, interpreter

        try:
            python = interpreter(options.ab_env, "--perfguard-ab-env")
        except EnvironmentChoiceError as exc:
            raise pytest.UsageError(str(exc)) from None
        head = options.orders.head_python
        beside = f"the environment of {head}" if head else "this environment"
        why = f"this tree measured in {python} (--perfguard-ab-env) beside {beside}"
        runs_in, label, reason = BaseEnvironment(python, why), f"this tree in {python}", why
    driver = Driver(
        root,
        label,
        root,
        lambda rootdir: worker_args(options, rootdir),
        seed=options.seed,
        traces=trace_dir(options),
        orders=options.orders,
        base_env=runs_in,
    )
    if options.orders.head_python:  # this tree's side in another environment too (bisect)
        driver.b.python = Path(options.orders.head_python)
        driver.b.shim = driver.a.shim
    driver.launch_both(items, paths)
    return AbSession(driver, ThisTree(root), commit, reason, list(items or ()), runs_in=runs_in)


def base_thresholds(ab: AbSession) -> Thresholds | None:
    """The base tree's rules, as its worker read them (its markers), when it said them."""
    from perfguard.stats.thresholds import Thresholds

    said = ab.driver.a.thresholds
    try:
        return None if said is None else Thresholds.from_json(said)
    except RecordError:
        return None


def base_result(outcome: SideOutcome, test: str, variant: str) -> VariantResult | None:
    """The base side's result; a failure there becomes an error or skipped result."""
    if outcome.result is not None:
        return outcome.result
    if outcome.outcome == "absent":
        return None  # the test is new: every verdict is `new`
    message = outcome.message or outcome.outcome
    if outcome.outcome == "skipped":
        return VariantResult(test=test, variant=variant, status="skipped", error=message)
    return VariantResult(test=test, variant=variant, status="error", error=message)
