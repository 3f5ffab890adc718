"""Git: where HEAD is, and which commit's baseline a run compares against.

`auto` looks, in order, at: the first parent of a pull-request merge commit (the base branch
tip); otherwise the merge-base of HEAD with the main branch (HEAD's first parent when HEAD is
on main); then first-parent ancestors of that start, up to a bounded depth. The first of those
commits that has a stored baseline wins, and the reason says which and why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfguard.errors import PerfguardError

DEFAULT_DEPTH = 50
SHALLOW_HINT = (
    "this is a shallow clone, so older commits are not here (GitHub Actions checks out one "
    "commit by default): set `fetch-depth: 0` on actions/checkout"
)


class GitError(PerfguardError):
    """A git question that has no answer here (bad ref, no repository)."""


@dataclass(frozen=True)
class GitState:
    root: Path
    head: str | None  # None in a repository without commits
    branch: str | None  # None on a detached HEAD
    dirty: bool
    shallow: bool


@dataclass(frozen=True)
class BaselineChoice:
    commit: str | None
    reason: str


def _repo(path: Path) -> Any:
    try:
        import git
    except ImportError as exc:  # gitpython needs the git executable
        raise GitError(f"git is not usable here: {exc}") from None
    try:
        repo = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitError(f"{path} is not inside a git repository") from None
    try:  # GitPython reads refs from files itself; git may still refuse the repository
        repo.git.rev_parse("--git-dir")
    except git.GitCommandError as exc:
        raise GitRefused(_refusal(Path(repo.working_tree_dir or path), str(exc.stderr))) from None
    return repo


class GitRefused(GitError):
    """git will not read a repository that is there (another user's checkout, say)."""


def _refusal(where: Path, stderr: str) -> str:
    """One line: what git said, and what to do."""
    text = stderr.strip()
    if text.startswith("stderr: '") and text.endswith("'"):  # as GitPython quotes it
        text = text[len("stderr: '") : -1]
    lines = [line.strip() for line in text.splitlines()]
    said = next((line.removeprefix("fatal: ") for line in lines if line.startswith("fatal:")), "")
    said = said or " ".join(line for line in lines if line) or "no reason given"
    if "dubious ownership" in said:
        return (
            f"git refuses to read the repository at {where}: {said} (the checkout belongs to "
            f"another user, as in CI containers); run `git config --global --add "
            f"safe.directory {where}` first"
        )
    return f"git refuses to read the repository at {where}: {said}"


def git_state(path: Path) -> GitState | None:
    """HEAD's sha, branch and dirty state; None outside a git repository. `GitRefused`
    when git will not read the repository there (its message says what to do)."""
    try:
        repo = _repo(path)
    except GitRefused:
        raise
    except GitError:
        return None
    try:
        head: str | None = repo.head.commit.hexsha
    except ValueError:  # no commits yet
        head = None
    branch = None if repo.head.is_detached else repo.active_branch.name
    # untracked files do not make a measurement differ from the commit; tracked edits do
    dirty = head is not None and repo.is_dirty(untracked_files=False)
    shallow = Path(repo.git_dir, "shallow").exists()
    return GitState(Path(repo.working_tree_dir or path), head, branch, dirty, shallow)


def git_state_or_refusal(path: Path) -> tuple[GitState | None, GitRefused | None]:
    """`git_state`, with git's refusal returned rather than raised: a session that measured
    keeps its results, and says why it could not compare or save."""
    try:
        return git_state(path), None
    except GitRefused as exc:
        return None, exc


def resolve_commit(path: Path, ref: str) -> str:
    repo = _repo(path)
    try:
        # verified: a full sha of a commit this clone lacks (a shallow one) must not pass
        return str(repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}"))
    except Exception:
        raise GitError(f"{ref!r} is not a revision of this repository") from None


def first_parent(path: Path) -> tuple[str | None, str]:
    """(HEAD's first parent's full sha, ""), or (None, why this checkout cannot measure
    beside it: the first commit, or a shallow clone that lacks it)."""
    repo = _repo(path)
    try:
        head = repo.head.commit
    except ValueError:
        return None, "the repository has no commits yet"
    if not head.parents:
        return None, f"HEAD ({head.hexsha[:10]}) has no parent: it is the first commit"
    parent = str(head.parents[0].hexsha)
    if not _has_commit(repo, parent):
        return None, (
            f"this checkout lacks HEAD's first parent {parent[:10]} (a shallow clone: "
            "set `fetch-depth: 2` or `0` on actions/checkout)"
        )
    return parent, ""


def changes_since(path: Path, base: str) -> tuple[Path, list[str], list[str], list[str]]:
    """(the repository's top folder, the paths that differ between commit `base` and the
    working tree, the untracked paths git does not ignore, the paths added since `base`), all
    relative to the top."""
    repo = _repo(path)
    try:
        diff = repo.git.diff("--name-only", "--no-renames", base, "--")
        added = repo.git.diff("--name-only", "--no-renames", "--diff-filter=A", base, "--")
        others = repo.git.ls_files("--others", "--exclude-standard", "--full-name")
    except Exception as exc:  # GitPython's command error: git's own words
        raise GitError(f"cannot list the changes since {base[:10]}: {exc}") from None
    top = Path(repo.working_tree_dir or path)
    return top, str(diff).splitlines(), str(others).splitlines(), str(added).splitlines()


def _main_ref(repo: Any, main_branch: str) -> str | None:
    for candidate in (main_branch, f"origin/{main_branch}", f"refs/remotes/origin/{main_branch}"):
        try:
            repo.commit(candidate)
        except Exception:
            continue
        return candidate
    return None


def _has_commit(repo: Any, sha: str) -> bool:
    """Whether this clone holds the commit (a shallow clone knows parents it lacks)."""
    try:
        repo.git.rev_parse("--verify", "--quiet", f"{sha}^{{commit}}")
    except Exception:
        return False
    return True


def _first_parent_walk(repo: Any, start: str, limit: int) -> list[str]:
    """`start` and its first-parent ancestors this clone holds, newest first."""
    if not _has_commit(repo, start):
        return []
    try:
        out = repo.git.rev_list("--first-parent", f"--max-count={limit}", start)
    except Exception as exc:  # a broken or grafted history
        raise GitError(f"cannot walk the history from {start[:10]}: {exc}") from None
    return [line for line in str(out).splitlines() if line]


def first_parent_commits(path: Path, start: str, limit: int) -> list[str]:
    """`start` and its first-parent ancestors, newest first, at most `limit` of them."""
    return _first_parent_walk(_repo(path), start, limit)


def _search_start(repo: Any, main_branch: str) -> tuple[str, str] | BaselineChoice:
    """(commit, why) the `auto` search starts from, or the reason there is none."""
    try:
        head = repo.head.commit
    except ValueError:
        return BaselineChoice(None, "not compared: the repository has no commits yet")
    shallow = Path(repo.git_dir, "shallow").exists()
    if len(head.parents) >= 2:
        base = head.parents[0].hexsha
        if not _has_commit(repo, base):
            return BaselineChoice(
                None,
                f"not compared: the base tip {base[:10]} (first parent of the pull-request "
                f"merge commit) is not in this clone; {SHALLOW_HINT}",
            )
        return (
            base,
            f"first parent of the pull-request merge commit {head.hexsha[:10]} (the base tip)",
        )
    main = _main_ref(repo, main_branch)
    if main is None:
        hint = f"; {SHALLOW_HINT}" if shallow else ""
        return BaselineChoice(
            None,
            f"not compared: no branch {main_branch!r} (or origin/{main_branch}) to "
            f"find a merge-base with (set the ini option perfguard_main_branch){hint}",
        )
    try:
        bases = repo.merge_base(head, main)
    except Exception:
        bases = []
    if not bases:
        hint = SHALLOW_HINT if shallow else "the histories are unrelated"
        return BaselineChoice(None, f"not compared: no merge-base of HEAD with {main}: {hint}")
    start = bases[0].hexsha
    if start != head.hexsha:
        return start, f"merge-base of HEAD with {main}"
    if not head.parents:
        return BaselineChoice(None, "not compared: HEAD is the first commit")
    parent = head.parents[0].hexsha
    if not _has_commit(repo, parent):
        return BaselineChoice(
            None, f"not compared: HEAD's parent {parent[:10]} is not in this clone; {SHALLOW_HINT}"
        )
    return parent, f"first parent of HEAD, which is on {main}"


def find_baseline(
    path: Path,
    has_baseline: Callable[[str], bool],
    *,
    main_branch: str = "main",
    depth: int = DEFAULT_DEPTH,
) -> BaselineChoice:
    """The `auto` choice: the nearest commit, in the documented order, with a baseline."""
    try:
        repo = _repo(path)
    except GitError as exc:
        return BaselineChoice(None, f"not compared: {exc}")
    found = _search_start(repo, main_branch)
    if isinstance(found, BaselineChoice):
        return found
    start, why = found
    shallow = Path(repo.git_dir, "shallow").exists()
    try:
        walk = _first_parent_walk(repo, start, depth + 1)
    except GitError as exc:
        return BaselineChoice(None, f"not compared: {exc}{'; ' + SHALLOW_HINT if shallow else ''}")
    for steps, sha in enumerate(walk):
        if has_baseline(sha):
            if steps == 0:
                return BaselineChoice(sha, f"{why}: {sha[:10]}")
            return BaselineChoice(
                sha,
                f"{sha[:10]}, {steps} first-parent step(s) back from the {why} "
                f"({start[:10]}), the nearest with a baseline",
            )
    searched = f"{len(walk)} commit(s) from the {why} ({start[:10]})"
    if shallow and len(walk) <= depth:
        return BaselineChoice(None, f"no baseline in {searched}; {SHALLOW_HINT}")
    return BaselineChoice(None, f"no baseline in {searched} (ini perfguard_baseline_depth={depth})")


def explicit_baseline(
    path: Path, ref: str, has_baseline: Callable[[str], bool], flag: str = "--perfguard-compare"
) -> BaselineChoice:
    """`flag`=REF (the option the user named the revision with): that commit's baseline, or
    a reason why there is none."""
    sha = resolve_commit(path, ref)
    if has_baseline(sha):
        return BaselineChoice(sha, f"asked for with {flag}={ref} ({sha[:10]})")
    return BaselineChoice(
        None, f"{flag}={ref} ({sha[:10]}) has no stored baseline for this machine"
    )


def ab_reference(
    path: Path,
    has_baseline: Callable[[str], bool],
    *,
    main_branch: str = "main",
    depth: int = DEFAULT_DEPTH,
) -> BaselineChoice:
    """`--perfguard-ab` without a REF: the commit `auto` would compare with.

    The nearest commit with a stored baseline when there is one (so both modes judge the same
    base), else the commit the search starts from (the base tip or merge-base): A/B
    measures it here and needs no stored baseline.
    """
    choice = find_baseline(path, has_baseline, main_branch=main_branch, depth=depth)
    if choice.commit is not None:
        return choice
    try:
        found = _search_start(_repo(path), main_branch)
    except GitError as exc:
        return BaselineChoice(None, str(exc))
    if isinstance(found, BaselineChoice):
        return found
    start, why = found
    return BaselineChoice(start, f"{why}: {start[:10]}")


def file_at(path: Path, commit: str, file: Path) -> str | None:
    """The text of `file` (a path in the working tree) at `commit`; None where the commit has
    no such file."""
    repo = _repo(path)
    name = file.resolve().relative_to(Path(repo.working_tree_dir).resolve()).as_posix()
    try:
        raw = repo.git.show(
            f"{commit}:{name}", strip_newline_in_stdout=False, stdout_as_string=False
        )
    except Exception:
        if not _has_commit(repo, commit):
            raise GitError(f"{commit[:10]} is not in this clone") from None
        return None
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GitError(
            f"{name} at {commit[:10]} is not UTF-8 text (byte {exc.start}: "
            f"{bytes(raw)[exc.start : exc.start + 1]!r}): save it as UTF-8"
        ) from None


def last_author(path: Path, base: str, head: str, file: Path) -> str:
    """Who last changed `file` between `base` and `head` (merge commits aside)."""
    repo = _repo(path)
    try:
        return str(
            repo.git.log("-1", "--no-merges", "--format=%an", f"{base}..{head}", "--", str(file))
        )
    except Exception:
        return ""


def ignored(path: Path, files: Sequence[str]) -> list[str]:
    """Those of `files` (relative to the repository's working tree at `path`) that git
    ignores; none where git cannot say."""
    if not files:
        return []
    repo = _repo(path)
    top = Path(repo.working_tree_dir or path).resolve()
    rel = {}
    for name in files:
        with contextlib.suppress(ValueError):
            rel[(Path(path).resolve() / name).relative_to(top).as_posix()] = name
    try:
        out = str(repo.git.check_ignore("--no-index", *rel))
    except Exception as exc:  # exit 1: none of them is ignored
        out = str(getattr(exc, "stdout", "") or "")
    found = {line.strip().strip("'\"") for line in out.splitlines() if line.strip()}
    return sorted(rel[f] for f in found if f in rel)


def worktrees(path: Path) -> list[Path]:
    """The folders of the repository's worktrees (`git worktree list`), its own first."""
    out = str(_repo(path).git.worktree("list", "--porcelain"))
    return [
        Path(line.removeprefix("worktree "))
        for line in out.splitlines()
        if line.startswith("worktree ")
    ]


def add_worktree(path: Path, folder: Path, commit: str) -> Path:
    """Check `commit` out, detached, as a worktree in `folder`; the top of the repository
    `path` is in (a pytest rootdir may sit below it)."""
    repo = _repo(path)
    try:
        repo.git.worktree("add", "--detach", str(folder), commit)
    except Exception as exc:
        raise GitError(f"could not check out {commit[:10]} as a worktree: {exc}") from None
    return Path(repo.working_tree_dir or path).resolve()


def remove_worktree(path: Path, folder: Path) -> None:
    """Remove the worktree in `folder`; gone already is fine (`prune_worktrees` forgets it)."""
    with contextlib.suppress(Exception):
        _repo(path).git.worktree("remove", "--force", str(folder))


def prune_worktrees(path: Path) -> None:
    """Forget the worktrees whose folder is gone (`git worktree prune`)."""
    with contextlib.suppress(Exception):
        _repo(path).git.worktree("prune")
