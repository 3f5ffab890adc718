"""Keep the baseline directory on a git branch of a remote (default `perfguard-baselines`).

Everything goes through git plumbing with a private, temporary index, so the user's checked-out
branch, index and working tree are never touched. `push` is safe against a concurrent pusher:
it fetches the branch, merges its own files into the fetched tree, and pushes without force;
if the remote moved in between, it fetches and tries again, so no baseline is lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.records import SHA, RecordError, Run
from perfguard.store.baselines import BaselineStore, key_problem, write_bytes_atomic
from perfguard.store.schema import SchemaError, upgrade

DEFAULT_BRANCH = "perfguard-baselines"
DEFAULT_REMOTE = "origin"
EMPTY_TREE_MESSAGE = "perfguard baselines"


class SyncError(Exception):
    """A git step of pull or push failed; the message says which and what git said."""


@dataclass(frozen=True)
class SyncResult:
    added: tuple[str, ...]  # paths relative to the baseline directory
    kept: tuple[str, ...]  # present on both sides with different content: ours kept
    attempts: int = 1
    refused: tuple[str, ...] = ()  # "path: why" of the branch's files that were not taken


def baseline_path_problem(path: str) -> str | None:
    """Why `path` (relative to the baseline directory) is not `<machine>/<sha>.json`."""
    parts = path.split("/")
    if len(parts) != 2:
        return "not <machine>/<full sha>.json"
    machine, name = parts
    stem, dot, ext = name.rpartition(".")
    if not dot or ext != "json" or not SHA.match(stem):
        return "not <machine>/<full sha>.json"
    return key_problem(machine, stem)


def baseline_content_problem(path: str, content: bytes) -> tuple[Run | None, str | None]:
    """The run in a baseline file's bytes, or why they are not one that belongs at `path`."""
    try:
        run = Run.from_json(upgrade(json.loads(content.decode("utf-8"))))
    except (ValueError, SchemaError, RecordError) as exc:
        return None, f"not a valid baseline file ({str(exc).splitlines()[0][:200]})"
    machine, name = path.split("/")
    if run.machine != machine or f"{run.commit}.json" != name:
        return None, f"it holds machine {run.machine!r}, commit {run.commit}: not its path"
    return run, None


def _git(
    root: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["git", *args], cwd=root, env={**os.environ, **(env or {})}, capture_output=True, text=True
    )
    if check and done.returncode != 0:
        what = (done.stderr or done.stdout).strip().splitlines()
        raise SyncError(f"git {' '.join(args[:2])} failed: {what[-1] if what else done.returncode}")
    return done


def _fetch(root: Path, remote: str, branch: str) -> str | None:
    """Fetch the branch into a private ref; its commit, or None when the remote has none."""
    ref = f"refs/perfguard/remote-{branch}"
    done = _git(
        root,
        "fetch",
        "--quiet",
        "--no-tags",
        remote,
        f"+refs/heads/{branch}:{ref}",
        check=False,
        env=_auth_env(),
    )
    if done.returncode != 0:
        message = (done.stderr or "").lower()
        if "couldn't find remote ref" in message or "could not find remote ref" in message:
            return None
        raise SyncError(f"git fetch {remote} {branch} failed: {done.stderr.strip()}")
    return _git(root, "rev-parse", ref).stdout.strip()


def _remote_files(root: Path, commit: str | None) -> dict[str, str]:
    """path -> blob sha of every baseline file on the branch."""
    if commit is None:
        return {}
    out = _git(root, "ls-tree", "-r", commit).stdout
    files = {}
    for line in out.splitlines():
        meta, path = line.split("\t", 1)
        files[path] = meta.split()[2]
    return files


def _local_files(baseline_dir: Path) -> dict[str, Path]:
    files = {}
    if baseline_dir.is_dir():
        for f in sorted(baseline_dir.glob("*/*.json")):
            if SHA.match(f.stem) and not f.parent.name.startswith("."):
                files[f"{f.parent.name}/{f.name}"] = f
    return files


def _blob_of(root: Path, path: Path) -> str:
    return _git(root, "hash-object", "-w", str(path)).stdout.strip()


def pull(
    root: Path, baseline_dir: Path, *, remote: str = DEFAULT_REMOTE, branch: str = DEFAULT_BRANCH
) -> SyncResult:
    """Bring the branch's baselines that are missing here; never overwrite a local file.

    Only `<machine>/<sha>.json` files that hold a valid baseline of that machine and commit
    are taken: the branch is written by CI, and whoever can push to it must not be able to
    plant other files (a `conftest.py`, a path with `..`) in the checkout.
    """
    commit = _fetch(root, remote, branch)
    remote_files = _remote_files(root, commit)
    local = _local_files(baseline_dir)
    added, kept, refused = [], [], []
    store = BaselineStore(baseline_dir)
    with store.locked():
        for path, blob in sorted(remote_files.items()):
            problem = baseline_path_problem(path)
            if problem is None and path in local:
                if _blob_of(root, local[path]) != blob:
                    kept.append(path)
                continue
            content = b""
            if problem is None:
                content = _git_bytes(root, "cat-file", "blob", blob)
                problem = baseline_content_problem(path, content)[1]
            if problem is not None:
                refused.append(f"{path}: {problem}")
                continue
            write_bytes_atomic(baseline_dir / path, content)
            added.append(path)
    return SyncResult(tuple(added), tuple(kept), refused=tuple(refused))


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
    replace a whole one); otherwise nothing is pushed and the error lists each file.
    """
    local = _local_files(baseline_dir)
    if not local:
        return SyncResult((), ())
    runs = _valid_local(local)
    why = ""
    for attempt in range(1, attempts + 1):
        parent = _fetch(root, remote, branch)
        remote_files = _remote_files(root, parent)
        blobs = {path: _blob_of(root, f) for path, f in local.items()}
        changed = sorted(p for p, b in blobs.items() if remote_files.get(p) != b)
        if not changed:
            return SyncResult((), (), attempt)
        _refuse_shrinking(root, {p: remote_files[p] for p in changed if p in remote_files}, runs)
        text = message or f"perfguard: {len(changed)} baseline(s)"
        commit = _commit(root, parent, {p: blobs[p] for p in changed}, text)
        done = _git(
            root,
            "push",
            "--quiet",
            remote,
            f"{commit}:refs/heads/{branch}",
            check=False,
            env=_auth_env(),
        )
        if done.returncode == 0:
            return SyncResult(tuple(changed), (), attempt)
        why = _server_reason(done.stderr or "")
        if not _lost_a_race(done.stderr or ""):
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


def _commit(root: Path, parent: str | None, blobs: dict[str, str], message: str) -> str:
    """A commit of the branch's tree (`parent`'s) with `blobs` at their paths, made in an
    index of its own (the user's index and working tree are not touched)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if parent is not None:
            _git(root, "read-tree", parent, env=env)
        for path, blob in blobs.items():
            _git(root, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
        tree = _git(root, "write-tree", env=env).stdout.strip()
    args: Sequence[str] = ("commit-tree", tree, "-m", message)
    if parent is not None:
        args = (*args, "-p", parent)
    return _git(root, *args, env=_identity(root)).stdout.strip()


# git's words when the branch moved between our fetch and our push (a concurrent pusher)
_RACE = ("non-fast-forward", "fetch first", "cannot lock ref", "failed to update ref")


def _lost_a_race(stderr: str) -> bool:
    text = stderr.lower()
    return any(words in text for words in _RACE) and "hook declined" not in text


def _server_reason(stderr: str) -> str:
    """What the server said (its `remote:` lines), else git's last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line[len("remote:") :].strip() for line in lines if line.startswith("remote:")]
    said = [line for line in said if line]
    return " / ".join(said) if said else (lines[-1] if lines else "no reason given")


def _refuse_shrinking(root: Path, theirs: dict[str, str], ours: dict[str, Run]) -> None:
    """Raise when a local file would replace a branch copy that holds results it lacks."""
    problems = []
    for path, blob in sorted(theirs.items()):
        content = _git_bytes(root, "cat-file", "blob", blob)
        run = baseline_content_problem(path, content)[0]
        if run is None:
            continue  # a broken copy on the branch may be replaced
        lost = {r.key for r in run.results} - {r.key for r in ours[path].results}
        if lost:
            test, variant = min(lost)
            problems.append(
                f"{path} has fewer results than the branch's copy ({len(lost)} missing, e.g. "
                f"{test} [{variant}]): save the whole suite, or pull and measure again"
            )
    if problems:
        raise SyncError("nothing pushed; " + "; ".join(problems))


def _git_bytes(root: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, check=True).stdout


def _auth_env() -> dict[str, str]:
    """With GITHUB_TOKEN set (a CI step), git's HTTP calls to the GitHub server carry it,
    for this one git process only: the checkout keeps no credentials, and nothing is
    written to the environment of later steps."""
    token = os.environ.get("GITHUB_TOKEN", "").strip()
    if not token:
        return {}
    import base64

    server = os.environ.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    auth = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    n = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)
    return {
        "GIT_CONFIG_COUNT": str(n + 1),
        f"GIT_CONFIG_KEY_{n}": f"http.{server}/.extraheader",
        f"GIT_CONFIG_VALUE_{n}": f"AUTHORIZATION: basic {auth}",
    }


def _identity(root: Path) -> dict[str, str]:
    """commit-tree needs an identity; CI machines often have none. The user's own wins."""
    if _git(root, "var", "GIT_COMMITTER_IDENT", check=False).returncode == 0:
        return {}
    env: dict[str, str] = {}
    for kind in ("AUTHOR", "COMMITTER"):
        env.setdefault(f"GIT_{kind}_NAME", os.environ.get(f"GIT_{kind}_NAME", "perfguard"))
        env.setdefault(
            f"GIT_{kind}_EMAIL", os.environ.get(f"GIT_{kind}_EMAIL", "perfguard@localhost")
        )
    return env
