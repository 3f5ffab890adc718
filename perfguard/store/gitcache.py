"""The private git repository that talks to the baselines branch's remote.

`<git dir>/perfguard/baselines.git`, a bare repository beside the checkout's own: pull, push
and retain fetch the branch's tip there (`--depth=1`, and `--filter=blob:none` where the server
allows it, as GitHub does), read and fetch files by id, and build and push commits there, so
the checkout's branches, index, working tree and configuration are never touched.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.errors import PerfguardError
from perfguard.git import GitError
from perfguard.git_run import Done, read_objects
from perfguard.git_run import run_git as git_command


class SyncError(PerfguardError):
    """A git step of pull or push failed; the message says which and what git said (a URL's
    credentials, `https://user:token@host`, never: they are replaced by `***`)."""

    def __init__(self, message: str) -> None:
        super().__init__(redacted(message))


_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")


def redacted(text: str) -> str:
    """`text` with the user and password of every URL in it replaced by `***`."""
    return _CREDENTIALS.sub(r"\1***@", text)


def run_git(
    root: Path,
    *args: str,
    env: dict[str, str] | None = None,
    check: bool = True,
    stdin: str | None = None,
) -> Done:
    """`git ARGS` in `root`; with `check`, a failure is a `SyncError` with git's last line."""
    done = git_command(root, *args, env=env, stdin=stdin)
    if check and done.returncode != 0:
        what = (done.stderr or done.stdout).strip().splitlines()
        raise SyncError(f"git {' '.join(args[:2])} failed: {what[-1] if what else done.returncode}")
    return done


@dataclass(frozen=True)
class Cache:
    """The private bare repository that talks to the remote for pull and push."""

    git_dir: Path
    remote: str  # as the user named it, for messages


def open_cache(root: Path, remote: str) -> Cache:
    """The private repository of `root`'s checkout, its `origin` set to `remote`'s URL."""
    common = run_git(root, "rev-parse", "--git-common-dir").stdout.strip()
    git_dir = (root / common).resolve() / "perfguard" / "baselines.git"
    if not (git_dir / "HEAD").is_file():
        git_dir.mkdir(parents=True, exist_ok=True)
        run_git(git_dir, "init", "--quiet", "--bare", str(git_dir))
        # git's automatic housekeeping in the foreground: run in the background, it rewrites
        # the shallow file while the next fetch reads it ("shallow file has changed")
        run_git(git_dir, "config", "gc.autoDetach", "false")
        run_git(git_dir, "config", "maintenance.autoDetach", "false")
    run_git(git_dir, "config", "remote.origin.url", remote_url(root, remote))
    return Cache(git_dir, remote)


def remote_url(root: Path, remote: str) -> str:
    """The URL of `remote` (a remote's name, or a URL or path itself); a local path becomes a
    file:// URL, the transport over which git honours a fetch filter."""
    done = run_git(root, "remote", "get-url", remote, check=False)
    url = done.stdout.strip() if done.returncode == 0 else remote
    if "://" in url or (":" in url.split("/")[0] and not Path(url).exists()):
        return url  # a URL, or scp-like user@host:path
    path = (root / url).resolve()
    if not path.exists():
        raise SyncError(f"git remote {remote!r}: no such remote (git remote -v lists them)")
    return path.as_uri()


def fetch_tip(cache: Cache, branch: str) -> str | None:
    """Fetch the branch's tip (no history, no file contents where the server allows) into
    the cache; its commit, or None when the remote has no such branch."""
    ref = f"refs/heads/{branch}"
    done = run_git(
        cache.git_dir,
        "fetch",
        "--quiet",
        "--no-tags",
        "--depth=1",
        "--filter=blob:none",
        "origin",
        f"+{ref}:{ref}",
        check=False,
        env=auth_env(),
    )
    if done.returncode != 0:
        message = (done.stderr or "").lower()
        if "couldn't find remote ref" in message or "could not find remote ref" in message:
            return None
        raise SyncError(f"git fetch {cache.remote} {branch} failed: {done.stderr.strip()}")
    return run_git(cache.git_dir, "rev-parse", ref).stdout.strip()


FETCH_BY_ID = (
    *("-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "origin"),
    *("--no-tags", "--no-write-fetch-head", "--recurse-submodules=no", "--filter=blob:none"),
    "--stdin",
)
"""How git fetches the objects a partial clone lacks (ids on stdin): here, the records."""


def blobs(cache: Cache, ids: Sequence[str]) -> dict[str, bytes]:
    """The content of the branch's files `ids`: those the cache lacks are fetched first, all
    in one request (as git itself fetches what a partial clone lacks)."""
    present = set(
        run_git(
            cache.git_dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"
        ).stdout.split()
    )
    missing = [i for i in dict.fromkeys(ids) if i not in present]
    if missing:
        done = run_git(
            cache.git_dir,
            *FETCH_BY_ID,
            env=auth_env(),
            check=False,
            stdin="\n".join(missing) + "\n",
        )
        if done.returncode != 0:
            raise SyncError(f"git fetch {cache.remote} (files by id) failed: {done.stderr.strip()}")
    return read_blobs(cache.git_dir, ids)


def read_blobs(root: Path, ids: Sequence[str]) -> dict[str, bytes]:
    """The content of git objects, read by one `git cat-file` process; a missing one is a
    SyncError naming it."""
    try:
        return read_objects(root, ids)
    except GitError as exc:
        raise SyncError(str(exc)) from None


def tree_files(root: Path, commit: str | None) -> dict[str, str]:
    """path -> blob sha of every baseline file on the branch."""
    if commit is None:
        return {}
    out = run_git(root, "ls-tree", "-r", commit).stdout
    files = {}
    for line in out.splitlines():
        meta, path = line.split("\t", 1)
        files[path] = meta.split()[2]
    return files


def store_blob(cache: Cache, path: Path) -> str:
    """Write a local file into the cache; its blob id."""
    return run_git(cache.git_dir, "hash-object", "-w", str(path.resolve())).stdout.strip()


def commit_tree(
    cache: Cache,
    parent: str | None,
    blobs: dict[str, str],
    message: str,
    identity: dict[str, str],
    remove: Sequence[str] = (),
    root_commit: bool = False,
) -> str:
    """A commit of the branch's tree (`parent`'s) with `blobs` at their paths and `remove`
    gone, made in an index of its own (the user's index and working tree are not touched);
    `root_commit`: with no parent (the branch's history rewritten to this one commit)."""
    root = cache.git_dir
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if parent is not None:
            run_git(root, "read-tree", parent, env=env)
        for path, blob in blobs.items():
            run_git(root, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
        if remove:  # mode 0 removes a path (--force-remove would want a work tree)
            lines = "".join(f"0 {'0' * 40}\t{path}\n" for path in remove)
            run_git(root, "update-index", "--index-info", env=env, stdin=lines)
        tree = run_git(root, "write-tree", env=env).stdout.strip()
    args: Sequence[str] = ("commit-tree", tree, "-m", message)
    if parent is not None and not root_commit:
        args = (*args, "-p", parent)
    return run_git(root, *args, env=identity).stdout.strip()


# git's words when the branch moved between our fetch and our push (a concurrent pusher)
RACE = ("non-fast-forward", "fetch first", "cannot lock ref", "failed to update ref")


def lost_a_race(stderr: str) -> bool:
    text = stderr.lower()
    return any(words in text for words in RACE) and "hook declined" not in text


def server_reason(stderr: str) -> str:
    """What the server said (its `remote:` lines), else git's last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line[len("remote:") :].strip() for line in lines if line.startswith("remote:")]
    said = [line for line in said if line]
    return " / ".join(said) if said else (lines[-1] if lines else "no reason given")


def auth_env() -> dict[str, str]:
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


def identity(root: Path) -> dict[str, str]:
    """Who commits to the branch: the identity git gives in the user's checkout (its own
    config included), else `perfguard` (CI machines often have none). The commit is made in
    the private repository, which reads no checkout's config: so the identity travels in
    the environment."""
    env: dict[str, str] = {}
    for kind in ("AUTHOR", "COMMITTER"):
        done = run_git(root, "var", f"GIT_{kind}_IDENT", check=False)
        found = re.match(r"(.*) <(.*)> \d+ [+-]\d{4}$", done.stdout.strip())
        name, email = found.groups() if done.returncode == 0 and found else ("", "")
        env[f"GIT_{kind}_NAME"] = name or os.environ.get(f"GIT_{kind}_NAME", "perfguard")
        env[f"GIT_{kind}_EMAIL"] = email or os.environ.get(
            f"GIT_{kind}_EMAIL", "perfguard@localhost"
        )
    return env
