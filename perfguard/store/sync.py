"""Keep the baseline directory on a git branch of a remote (default `perfguard-baselines`).

Everything goes through git plumbing in a private bare repository beside the checkout's own
(`<git dir>/perfguard/baselines.git`), so the user's branches, index, working tree and
configuration are never touched. That repository fetches the branch's tip alone (`--depth=1`)
and, where the server allows it (GitHub does), without file contents (`--filter=blob:none`):
the records a pull takes are then fetched by id, in one round trip, and nothing else. So a
pull costs the files it takes, whatever the length of the branch's history. `push` is safe
against a concurrent pusher: it fetches the branch, merges its own files into the fetched
tree, and pushes without force (only the new objects travel); if the remote moved in between,
it fetches and tries again, so no baseline is lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.files import write_bytes_atomic
from perfguard.records import Run
from perfguard.store import gitcache
from perfguard.store.baselines import BaselineStore, key_problem, split_name
from perfguard.store.gitcache import SyncError as SyncError
from perfguard.store.run_file import BaselineError, parse_run
from perfguard.store.summary import (
    SUMMARY_DIR,
    SummaryError,
    _fastparquet,
    blob_id,
    part_path,
    read_part,
)

DEFAULT_BRANCH = "perfguard-baselines"
DEFAULT_REMOTE = "origin"
EMPTY_TREE_MESSAGE = "perfguard baselines"


@dataclass(frozen=True)
class SyncResult:
    added: tuple[str, ...]  # paths relative to the baseline directory
    kept: tuple[str, ...]  # present on both sides with different content: ours kept
    attempts: int = 1
    refused: tuple[str, ...] = ()  # "path: why" of the branch's files that were not taken
    summaries: int = 0  # summary parts (the history's table) taken or sent with them


def baseline_path_problem(path: str) -> str | None:
    """Why `path` (relative to the baseline directory) is not `<machine>/<sha>.json[.gz]`."""
    parts = path.split("/")
    named = split_name(parts[-1]) if len(parts) == 2 else None
    if named is None:
        return "not <machine>/<full sha>.json.gz (or .json)"
    return key_problem(parts[0], named[0])


def summary_key(path: str) -> tuple[str, str] | None:
    """(machine, sha) of a summary part's path `.summary/<machine>/<sha>.parquet`, or None."""
    parts = path.split("/")
    if len(parts) != 3 or parts[0] != SUMMARY_DIR or not parts[2].endswith(".parquet"):
        return None
    machine, sha = parts[1], parts[2].removesuffix(".parquet")
    return None if key_problem(machine, sha) else (machine, sha)


def summary_content_problem(path: str, content: bytes) -> str | None:
    """Why a summary part's bytes are not the rows of the commit its path names, or None."""
    key = summary_key(path)
    assert key is not None
    try:
        table = read_part(content, path)
    except SummaryError as exc:
        return str(exc).removeprefix(f"{path}: ")
    if not table.empty and not (
        (table["machine"] == key[0]).all() and (table["commit"] == key[1]).all()
    ):
        return "it holds rows of another machine or commit: not its path"
    return None


def _local_parts(baseline_dir: Path, keys: set[tuple[str, str]]) -> dict[str, Path]:
    """path -> file of the local summary parts of the baselines `keys`."""
    found = {}
    for machine, sha in sorted(keys):
        f = part_path(baseline_dir, machine, sha)
        if f.is_file():
            found[f"{SUMMARY_DIR}/{machine}/{sha}.parquet"] = f
    return found


def baseline_key(path: str) -> tuple[str, str]:
    """(machine, sha) of a baseline path that `baseline_path_problem` accepts."""
    machine, name = path.split("/")
    named = split_name(name)
    assert named is not None
    return machine, named[0]


def baseline_content_problem(path: str, content: bytes) -> tuple[Run | None, str | None]:
    """The run in a baseline file's bytes, or why they are not one that belongs at `path`."""
    try:
        run = parse_run(content, path)
    except BaselineError as exc:
        reason = str(exc).removeprefix(f"{path}: ").splitlines()[0][:200]
        return None, f"not a valid baseline file ({reason})"
    if (run.machine, run.commit) != baseline_key(path):
        return None, f"it holds machine {run.machine!r}, commit {run.commit}: not its path"
    return run, None


def _local_files(baseline_dir: Path) -> dict[str, Path]:
    """path -> file of every local baseline (one a commit: the compressed one first)."""
    return {f"{machine}/{f.name}": f for machine, f in BaselineStore(baseline_dir).files()}


def by_key(paths: Sequence[str]) -> dict[tuple[str, str], list[str]]:
    """The baseline paths among `paths`, grouped by (machine, sha): a commit's file may be
    there in both forms (an older plain one beside its compact one)."""
    out: dict[tuple[str, str], list[str]] = {}
    for path in paths:
        if baseline_path_problem(path) is None:
            out.setdefault(baseline_key(path), []).append(path)
    return out


def records_by_key(paths: Sequence[str]) -> dict[tuple[str, str], str]:
    """The one baseline file of each (machine, sha) among `paths`: the compressed one where
    an older plain one of the same commit is still there."""
    return {
        key: max(found, key=lambda p: p.endswith(".gz")) for key, found in by_key(paths).items()
    }


Selection = Callable[[set[tuple[str, str]]], tuple[set[tuple[str, str]], set[tuple[str, str]]]]
"""Given the (machine, sha) of every baseline on the branch: those whose records, and those
whose summary parts, a pull takes."""


def pull(
    root: Path,
    baseline_dir: Path,
    *,
    remote: str = DEFAULT_REMOTE,
    branch: str = DEFAULT_BRANCH,
    only: Selection | None = None,
) -> SyncResult:
    """Bring the branch's baselines that are missing here (or those `only` selects); never
    overwrite a local file.

    Only `<machine>/<sha>.json.gz` (or `.json`) files that hold a valid baseline of that
    machine and commit are taken, and summary parts that hold the rows of theirs: the branch
    is written by CI, and whoever can push to it must not be able to plant other files (a
    `conftest.py`, a path with `..`) in the checkout.
    """
    cache = gitcache.open_cache(root, remote)
    remote_files = gitcache.tree_files(cache.git_dir, gitcache.fetch_tip(cache, branch))
    records = records_by_key(list(remote_files))
    want_records, want_parts = only(set(records)) if only else (set(records), set(records))
    local = _local_files(baseline_dir)
    have = set(by_key(list(local)))
    kept = [
        path
        for path, f in local.items()
        if path in remote_files and blob_id(f.read_bytes()) != remote_files[path]
    ]
    refused = [
        f"{path}: {problem}"
        for path in sorted(remote_files)
        if summary_key(path) is None and (problem := baseline_path_problem(path)) is not None
    ]
    take = sorted(records[k] for k in want_records if k not in have)
    parts = _parts_to_take(baseline_dir, remote_files, want_parts)
    content = gitcache.blobs(cache, [remote_files[p] for p in (*take, *parts)])
    added = []
    with BaselineStore(baseline_dir).locked():
        for path in take:
            problem = baseline_content_problem(path, content[remote_files[path]])[1]
            if problem is not None:
                refused.append(f"{path}: {problem}")
                continue
            write_bytes_atomic(baseline_dir / path, content[remote_files[path]])
            added.append(path)
        summaries = 0
        for path in parts:
            problem = summary_content_problem(path, content[remote_files[path]])
            if problem is not None:
                refused.append(f"{path}: {problem}")
                continue
            write_bytes_atomic(baseline_dir / path, content[remote_files[path]])
            summaries += 1
    return SyncResult(
        tuple(added), tuple(sorted(kept)), refused=tuple(sorted(refused)), summaries=summaries
    )


def _parts_to_take(
    baseline_dir: Path, remote_files: dict[str, str], keys: set[tuple[str, str]]
) -> list[str]:
    """The branch's summary parts of `keys` that are not here yet. None without fastparquet
    (a job that installed perfguard alone): a part is validated before it is taken, and
    history makes a missing part again from its record."""
    try:
        _fastparquet()
    except ImportError:
        return []
    return [
        path
        for path in sorted(remote_files)
        if (key := summary_key(path)) is not None
        and key in keys
        and not part_path(baseline_dir, *key).exists()
    ]


def for_run(
    root: Path,
    ref: str,
    *,
    main_branch: str = "main",
    depth: int = 50,
    history: int = 20,
    choices: list[str] | None = None,
) -> Selection:
    """What a run on `root`'s HEAD compared with `ref` (`auto`, or a git revision) needs of the
    branch: for each machine, the record of the baseline it would choose, and the summary
    parts of the `history` baselines on that commit's first-parent line (the noise floor and
    the trend chart); and HEAD's own records (a save updates them). `choices` gets one line
    per machine saying what was chosen."""
    from perfguard.git import explicit_baseline, find_baseline, first_parent_commits, resolve_commit

    def select(
        available: set[tuple[str, str]],
    ) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        records: set[tuple[str, str]] = set()
        parts: set[tuple[str, str]] = set()
        head = resolve_commit(root, "HEAD")
        for machine in sorted({m for m, _ in available}):
            shas = {sha for m, sha in available if m == machine}
            if ref == "auto":
                choice = find_baseline(
                    root, shas.__contains__, main_branch=main_branch, depth=depth
                )
            else:
                choice = explicit_baseline(root, ref, shas.__contains__, flag="--for")
            if choices is not None:
                chosen = choice.commit[:10] if choice.commit else "none"
                choices.append(f"{machine}: {chosen} ({choice.reason})")
            if head in shas:
                records.add((machine, head))
            if choice.commit is None:
                continue
            records.add((machine, choice.commit))
            line = [sha for sha in first_parent_commits(root, choice.commit, 500) if sha in shas]
            parts.update((machine, sha) for sha in line[:history])
        return records, parts

    return select


def push(
    root: Path,
    baseline_dir: Path,
    *,
    remote: str = DEFAULT_REMOTE,
    branch: str = DEFAULT_BRANCH,
    attempts: int = 8,
    message: str | None = None,
) -> SyncResult:
    """Add the local baselines to the branch (ours win on the same path), retrying on races.

    All or nothing: every local file must be a valid baseline at its own path, and none may
    hold fewer results than the branch's copy of the same commit (a partial save must not
    replace a whole one); otherwise nothing is pushed and the error lists each file. Only
    what changed is sent.
    """
    local = _local_files(baseline_dir)
    if not local:
        return SyncResult((), ())
    runs = _valid_local(local)
    parts = _local_parts(baseline_dir, set(by_key(list(local))))
    files = local | parts
    ids = {path: blob_id(f.read_bytes()) for path, f in files.items()}
    cache = gitcache.open_cache(root, remote)
    why = ""
    for attempt in range(1, attempts + 1):
        parent = gitcache.fetch_tip(cache, branch)
        remote_files = gitcache.tree_files(cache.git_dir, parent)
        changed = sorted(p for p in local if remote_files.get(p) != ids[p])
        new_parts = sorted(p for p in parts if remote_files.get(p) != ids[p])
        if not changed and not new_parts:
            return SyncResult((), (), attempt)
        # the branch's copies of the same commits, in either form: checked, and the other
        # form removed (a compact file replaces the older plain one)
        on_branch = by_key(list(remote_files))
        theirs = {
            (ours, path): remote_files[path]
            for ours in changed
            for path in on_branch.get(baseline_key(ours), [])
        }
        _refuse_shrinking(cache, theirs, runs)
        gone = sorted({path for _, path in theirs} - set(changed))
        blobs = {p: gitcache.store_blob(cache, files[p]) for p in (*changed, *new_parts)}
        text = message or f"perfguard: {len(changed)} baseline(s)"
        commit = gitcache.commit_tree(
            cache, parent, blobs, text, gitcache.identity(root), remove=gone
        )
        done = gitcache.run_git(
            cache.git_dir,
            "push",
            "--quiet",
            "origin",
            f"{commit}:refs/heads/{branch}",
            check=False,
            env=gitcache.auth_env(),
        )
        if done.returncode == 0:
            return SyncResult(tuple(changed), (), attempt, summaries=len(new_parts))
        why = gitcache.server_reason(done.stderr or "")
        if not gitcache.lost_a_race(done.stderr or ""):
            raise SyncError(f"git push {remote} {branch} was refused: {why}")
        time.sleep(0.05 * attempt)  # someone else pushed first: fetch their files and retry
    raise SyncError(
        f"git push {remote} {branch}: still behind after {attempts} attempts, each time "
        f"because another push landed first ({why}); run perfguard baselines push again"
    )


def _valid_local(local: dict[str, Path]) -> dict[str, Run]:
    """Every local file read as a baseline at its own path; any problem pushes nothing."""
    runs: dict[str, Run] = {}
    problems = []
    for path, f in local.items():
        run, problem = baseline_content_problem(path, f.read_bytes())
        if problem is None:
            assert run is not None
            runs[path] = run
        else:
            problems.append(f"{f}: {problem}")
    if problems:
        raise SyncError("nothing pushed; " + "; ".join(problems))
    return runs


def _refuse_shrinking(
    cache: gitcache.Cache, theirs: dict[tuple[str, str], str], ours: dict[str, Run]
) -> None:
    """Raise when a local file would replace a branch copy that holds results it lacks.

    `theirs`: (our path, the branch's path of the same commit) -> the branch's blob.
    """
    problems = []
    contents = gitcache.blobs(cache, list(theirs.values()))
    for (path, their_path), blob in sorted(theirs.items()):
        content = contents[blob]
        run = baseline_content_problem(their_path, content)[0]
        if run is None:
            continue  # a broken copy on the branch may be replaced
        lost = {r.key for r in run.results} - {r.key for r in ours[path].results}
        # a measured result must not give way to an error or skip of the same item either
        ok = {r.key for r in ours[path].results if r.status == "ok"}
        failed = {r.key for r in run.results if r.status == "ok"} - ok - lost
        if lost:
            test, variant = min(lost)
            problems.append(
                f"{path} has fewer results than the branch's copy ({len(lost)} missing, e.g. "
                f"{test} [{variant}]): save the whole suite, or pull and measure again"
            )
        elif failed:
            test, variant = min(failed)
            problems.append(
                f"{path} has {len(failed)} result(s) that failed or were skipped where the "
                f"branch's copy has them measured (e.g. {test} [{variant}]): fix them and "
                "save again, or pull and measure again"
            )
    if problems:
        raise SyncError("nothing pushed; " + "; ".join(problems))
