"""The fault audit's families that need a repository, a remote, an API or a process to kill:
`git`, `branch`, `api` and `signals` (run by `benchmarks.fault_audit`, which says how a case
is judged)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.fault_harness import (
    MODELS,
    PASSWORD,
    PYTEST_FAST,
    TOKEN,
    Case,
    Ran,
    Seed,
    perfguard,
    pytest_session,
)
from perfguard import scratch
from tests.github_fake import FakeGitHub
from tests.gitrepo import git
from tests.test_signals import INTERRUPT_TORCH_IMPORT

BRANCH = "perfguard-baselines"


def copy_seed(seed: Seed, tmp: Path) -> Path:
    repo = tmp / "repo"
    shutil.copytree(seed.repo, repo, symlinks=True)
    return repo


def results_kept(repo: Path, name: str = "out.json") -> list[str]:
    path = repo / name
    if not path.exists():
        return [f"no {name}: the measurements were lost"]
    if not json.loads(path.read_text())["results"]:
        return [f"{name} holds no results"]
    return []


def said(out: str, *words: str) -> list[str]:
    return (
        []
        if any(w.lower() in out.lower() for w in words)
        else [f"nothing said of {' or '.join(words)}"]
    )


# ---- git ----


def git_cases(seed: Seed) -> list[Case]:
    cases: list[Case] = []

    def case(
        name: str,
        prepare: Callable[[Path], Path],
        args: Sequence[str],
        words: Sequence[str],
        codes: tuple[int, ...] = (0,),
    ) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            repo = prepare(tmp)
            ran = pytest_session("--perfguard", "--perfguard-json=out.json", *args, cwd=repo)
            kept = [] if ran.rc == 4 else results_kept(repo)  # 4: refused before measuring
            return ran, kept + said(ran.out, *words)

        cases.append(Case("git", name, "ok", act, codes=codes))

    def plain(tmp: Path) -> Path:
        repo = tmp / "plain"
        repo.mkdir()
        (repo / "test_models.py").write_text(MODELS.format(width=64))
        return repo

    def empty(tmp: Path) -> Path:
        repo = plain(tmp)
        git(repo, "init", "-q", "-b", "main")
        return repo

    def shallow(tmp: Path) -> Path:
        repo = tmp / "shallow"
        git(tmp, "clone", "-q", "--depth", "1", f"file://{seed.repo}", str(repo))
        return repo

    def refused(tmp: Path) -> Path:
        repo = copy_seed(seed, tmp)
        git(repo, "config", "core.repositoryformatversion", "99")
        return repo

    def detached(tmp: Path) -> Path:
        repo = copy_seed(seed, tmp)
        git(repo, "checkout", "-q", "--detach", "HEAD~1")
        return repo

    def foreign(tmp: Path) -> Path:
        repo = copy_seed(seed, tmp)
        subprocess.run(["chown", "-R", "54321:54321", str(repo)], check=True)
        return repo

    case("not a repository, --perfguard-save", plain, ["--perfguard-save"], ["git"], codes=(0, 4))
    case("not a repository, compared", plain, [], ["git", "baseline"])
    case(
        "a repository with no commits, saved", empty, ["--perfguard-save"], ["commit"], codes=(0, 4)
    )
    case("a depth-1 clone, compared", shallow, [], ["fetch-depth"])
    case(
        "a repository git refuses to open", refused, ["--perfguard-save"], ["git"], codes=(0, 2, 4)
    )
    case(
        "--perfguard-compare at a ref that does not exist",
        lambda t: copy_seed(seed, t),
        ["--perfguard-compare=no-such-ref"],
        ["no-such-ref"],
        codes=(0, 2, 4),
    )
    case("a detached HEAD, saved", detached, ["--perfguard-save"], ["saved"])
    if os.geteuid() == 0:
        case(
            "a checkout owned by another user (dubious ownership)",
            foreign,
            ["--perfguard-save"],
            ["safe.directory"],
            codes=(0, 2, 4),
        )

    def ab_missing(tmp: Path) -> tuple[Ran, list[str]]:
        repo = copy_seed(seed, tmp)
        return pytest_session("--perfguard", "--perfguard-ab=no-such-ref", cwd=repo), []

    cases.append(
        Case(
            "git",
            "--perfguard-ab at a ref that does not exist",
            "refuse",
            ab_missing,
            names="no-such-ref",
        )
    )
    return cases


# ---- branch ----


def make_remote(seed: Seed, tmp: Path) -> tuple[Path, Path]:
    """A bare remote with main and a baselines branch pushed by perfguard; a clone of it."""
    remote = tmp / "remote.git"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(remote))
    repo = copy_seed(seed, tmp)
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "main")
    ran = perfguard("baselines", "push", "--remote", "origin", cwd=repo)
    if ran.rc:
        raise RuntimeError(f"seeding the branch: {ran.out}")
    return remote, repo


def tamper(
    remote: Path, tmp: Path, files: dict[str, bytes | None], link: tuple[str, str] | None = None
) -> None:
    """Commit files (None: delete) to the remote's baselines branch, as anyone who can write
    to it could."""
    work = tmp / "tamper"
    git(tmp, "clone", "-q", "-b", BRANCH, str(remote), str(work))
    for name, data in files.items():
        path = work / name
        if data is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if link:
        (work / link[0]).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link[1], work / link[0])
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "tampered")
    git(work, "push", "-q", "origin", BRANCH)


def record_names(remote: Path) -> list[str]:
    listing = git(remote, "ls-tree", "-r", "--name-only", BRANCH)
    return [
        n
        for n in listing.splitlines()
        if n.endswith((".json", ".json.gz")) and "/summary" not in n and not n.startswith("summary")
    ]


def branch_cases(seed: Seed) -> list[Case]:
    cases: list[Case] = []

    def pulled(
        name: str,
        files: dict[str, bytes | None],
        link: tuple[str, str] | None,
        words: Sequence[str],
    ) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            remote, _ = make_remote(seed, tmp)
            tamper(remote, tmp, files, link)
            fresh = tmp / "fresh"
            git(tmp, "clone", "-q", str(remote), str(fresh))
            ran = perfguard("baselines", "pull", "--remote", "origin", cwd=fresh)
            problems = said(ran.out, *words)
            strays = [
                p
                for p in fresh.rglob("*")
                if p.name in ("conftest.py", "evil.json")
                and "baselines" not in p.parts[len(fresh.parts) :][:1]
            ]
            problems += [f"wrote {p}" for p in strays]
            if (tmp / "outside.json").exists():
                problems.append("wrote outside the baseline folder")
            if not list((fresh / "baselines").rglob("*.json*")):
                problems.append("no good record was pulled")
            return ran, problems

        cases.append(Case("branch", f"pull: {name}", "ok", act))

    some = record_names_of(seed)
    machine = some[0].split("/")[0]
    pulled(
        "a conftest.py at the branch's root",
        {"conftest.py": b"import os\nos.system('touch /tmp/pwned')\n"},
        None,
        ["conftest.py"],
    )
    pulled(
        "a record that is not <sha>.json",
        {f"{machine}/notasha.json": b"{}"},
        None,
        ["notasha.json"],
    )
    pulled(
        "a symlink out of the folder",
        {},
        (f"{machine}/{'e' * 40}.json", "../../outside.json"),
        ["e" * 8],
    )
    pulled(
        "a truncated record",
        {some[0]: b'{"schema_version": 7, "res'},
        None,
        [some[0].split("/")[-1].split(".")[0][:8]],
    )

    def read(command: str) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            remote, repo = make_remote(seed, tmp)
            tamper(remote, tmp, {some[0]: b"not json"})
            git(repo, "fetch", "-q", "origin", BRANCH)
            extra = ["-o", str(tmp / "site")] if command == "site" else []
            ran = perfguard(command, "--branch", f"origin/{BRANCH}", *extra, cwd=repo)
            return ran, said(ran.out, some[0].split("/")[-1].split(".")[0][:8], "left out")

        cases.append(Case("branch", f"{command} --branch with one broken record", "ok", act))

    read("history")
    read("site")

    def pushed(name: str, edit: Callable[[dict[str, object]], None]) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            remote, repo = make_remote(seed, tmp)
            before = git(remote, "rev-parse", BRANCH)
            local = next(
                p for p in (repo / "baselines").rglob("*.json*") if "summary" not in p.parts
            )
            raw = local.read_bytes()
            gz = local.name.endswith(".gz")
            doc = json.loads(gzip.decompress(raw) if gz else raw)
            edit(doc)
            data = json.dumps(doc).encode()
            local.write_bytes(gzip.compress(data) if gz else data)
            ran = perfguard("baselines", "push", "--remote", "origin", cwd=repo)
            after = git(remote, "rev-parse", BRANCH)
            return ran, (
                [] if before == after else ["the branch changed: its results were replaced"]
            )

        cases.append(Case("branch", f"push: {name}", "refuse", act, names="nothing pushed"))

    pushed("a copy with fewer results", lambda d: d.__setitem__("results", d["results"][:1]))  # type: ignore[index]

    def all_errors(doc: dict[str, object]) -> None:
        for r in doc["results"]:  # type: ignore[attr-defined]
            r.update(
                status="error", error="RuntimeError: CUDA out of memory", metrics={}, samples_ms=[]
            )

    pushed("a copy whose every result failed", all_errors)

    def bad_remote(name: str, url: str, words: Sequence[str]) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            repo = copy_seed(seed, tmp)
            ran = perfguard("baselines", "push", "--remote", url, cwd=repo)
            return ran, said(ran.out, *words)

        cases.append(Case("branch", f"push: {name}", "refuse", act, names=""))

    bad_remote(
        "to a remote that does not exist", str(Path("/nonexistent/remote.git")), ["nonexistent"]
    )
    bad_remote(
        "to a URL with a password", f"http://audit:{PASSWORD}@127.0.0.1:9/x.git", ["127.0.0.1"]
    )
    return cases


def record_names_of(seed: Seed) -> list[str]:
    return [str(p.relative_to(seed.repo / "baselines")) for p in seed.baseline_files]


# ---- api ----


def api_cases(seed: Seed) -> list[Case]:
    cases: list[Case] = []

    def case(
        name: str,
        setup: Callable[[FakeGitHub, FakeGitHub], None],
        words: str,
        env: dict[str, str] | None = None,
        expect: str = "refuse",
    ) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            body = tmp / "report.md"
            body.write_text("## perfguard\nall unchanged\n")
            with FakeGitHub(token=TOKEN) as api, FakeGitHub(token="other") as elsewhere:
                api.add("<!-- perfguard -->\nold", author="github-actions[bot]")
                setup(api, elsewhere)
                ran = perfguard(
                    "comment",
                    "--repo",
                    api.repo,
                    "--pr",
                    str(api.pr),
                    "--body-file",
                    str(body),
                    cwd=tmp,
                    env={"GITHUB_API_URL": api.url, **(env or {})},
                )
                leaked = [a for a in elsewhere.authorizations if TOKEN in a]
            return ran, (["the token reached another host"] if leaked else [])

        cases.append(Case("api", name, expect, act, names=words))

    def redirect(api: FakeGitHub, elsewhere: FakeGitHub) -> None:
        api.redirect_root, api.redirects = elsewhere.url.replace("127.0.0.1", "localhost"), 5

    def redirect_port(api: FakeGitHub, elsewhere: FakeGitHub) -> None:
        api.redirect_root, api.redirects = elsewhere.url, 5

    def loop(api: FakeGitHub, elsewhere: FakeGitHub) -> None:
        api.looping = True

    def next_elsewhere(api: FakeGitHub, elsewhere: FakeGitHub) -> None:
        api.page_size, api.next_root = 1, elsewhere.url
        for i in range(3):
            api.add(f"a human's comment {i}")

    def failing(*codes: int) -> Callable[[FakeGitHub, FakeGitHub], None]:
        def setup(api: FakeGitHub, elsewhere: FakeGitHub) -> None:
            api.failures = list(codes)

        return setup

    def forbidden(api: FakeGitHub, elsewhere: FakeGitHub) -> None:
        api.forbidden = True

    def nothing(api: FakeGitHub, elsewhere: FakeGitHub) -> None:
        return None

    case("a redirect to another host", redirect, "another host")
    case("a redirect to another port", redirect_port, "another host")
    case("a next page that points to itself", loop, "page")
    case("a next page on another host", next_elsewhere, "another host")
    case("500 on every try", failing(*[500] * 12), "500")
    case("two 502s, then fine (retried)", failing(502, 502), "", expect="ok")
    case("403: the token may not write", forbidden, "403")
    case("401: a wrong token", nothing, "401", env={"GITHUB_TOKEN": "ghs_wrong"})
    case(
        "a token holding a newline",
        nothing,
        "GITHUB_TOKEN",
        env={"GITHUB_TOKEN": TOKEN + "\nX-Injected: 1"},
    )
    case("no token", nothing, "GITHUB_TOKEN", env={"GITHUB_TOKEN": ""})
    case(
        "an API that does not answer",
        nothing,
        "127.0.0.1:9",
        env={"GITHUB_API_URL": "http://127.0.0.1:9"},
    )

    def missing_body(tmp: Path) -> tuple[Ran, list[str]]:
        return perfguard(
            "comment",
            "--repo",
            "o/r",
            "--pr",
            "1",
            "--body-file",
            "nope.md",
            cwd=tmp,
            env={"GITHUB_API_URL": "http://127.0.0.1:9"},
        ), []

    cases.append(
        Case("api", "a body file that does not exist", "refuse", missing_body, names="nope.md")
    )
    return cases


# ---- signals ----


def start_session(
    repo: Path, args: Sequence[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest", *PYTEST_FAST, "--perfguard", *args],
            cwd=repo,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            # Ctrl-C's default, however the audit was started (a background job inherits
            # SIGINT ignored, and Python keeps it so)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def records_readable(folder: Path) -> list[str]:
    problems = []
    for path in folder.rglob("*.json*"):
        if path.name.endswith(".tmp"):
            continue
        try:
            raw = path.read_bytes()
            json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name} does not read back: {exc}")
    return problems


def widened(seed: Seed, tmp: Path) -> Path:
    repo = copy_seed(seed, tmp)
    (repo / "test_models.py").write_text(MODELS.format(width=512))
    git(repo, "commit", "-q", "-am", "C: wider still")
    return repo


def signal_cases(seed: Seed) -> list[Case]:
    cases: list[Case] = []

    def killed(
        name: str,
        sig: signal.Signals,
        after: float,
        args: Sequence[str],
        expect_words: Sequence[str],
    ) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            repo = widened(seed, tmp)
            before = {p: p.read_bytes() for p in (repo / "baselines").rglob("*.json*")}
            log = tmp / "log.txt"
            proc = start_session(repo, args, log)
            time.sleep(after)
            finished_early = proc.poll() is not None
            if not finished_early:
                os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                return Ran(-1, log.read_text(errors="replace")), ["did not end after the signal"]
            out = log.read_text(errors="replace")
            problems = records_readable(repo / "baselines")
            problems += [
                f"{p.name} changed"
                for p, data in before.items()
                if p.exists() and p.read_bytes() != data and "summary" not in p.parts
            ]
            if finished_early and sig != signal.SIGKILL:  # a kill after the end: files checked
                problems.append(
                    f"the session ended before the signal at {after} s (not a test of it)"
                )
            elif sig != signal.SIGKILL:
                problems += said(out, *expect_words)
            return Ran(0, out), problems

        cases.append(Case("signals", name, "ok", act))

    # spread over a save's whole session, its end (the write) most densely
    for share in (0.3, 0.6, 0.8, 0.9, 0.95, 0.98, 1.0, 1.03):
        after = round(seed.save_seconds * share, 2)
        name = f"kill -9 during a save at {share:.0%} of its time ({after} s)"
        killed(name, signal.SIGKILL, after, ["--perfguard-save"], [])
    for sig in (signal.SIGTERM, signal.SIGINT):
        killed(
            f"{sig.name} during a save",
            sig,
            5.0,
            ["--perfguard-save", "--perfguard-json=out.json"],
            ["not saved"],
        )

    def during_import(sig: signal.Signals) -> Callable[[Path], tuple[Ran, list[str]]]:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            repo = copy_seed(seed, tmp)  # the session sends it to itself halfway through torch
            hook = INTERRUPT_TORCH_IMPORT.replace("{name}", sig.name)
            (repo / "conftest.py").write_text(hook)
            ran = pytest_session("--perfguard", "--perfguard-json=out.json", cwd=repo)
            problems = [] if (repo / "out.json").exists() else ["no results file"]
            return ran, problems + said(ran.out, "interrupt", "SIG")

        return act

    for sig in (signal.SIGTERM, signal.SIGINT):
        name = f"{sig.name} while collection imports torch"
        cases.append(Case("signals", name, "ok", during_import(sig), codes=(2,)))

    def ab_killed(tmp: Path) -> tuple[Ran, list[str]]:
        repo = copy_seed(seed, tmp)
        temp = tmp / "t"
        temp.mkdir()
        env = {"TMPDIR": str(temp)}
        # (the seed's two commits hold the same code: measured whole, not a partial run)
        proc = start_session(
            repo, ["--perfguard-ab=HEAD~1", "--perfguard-full"], tmp / "log1.txt", env
        )
        time.sleep(6.0)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # perfguard's own folders (torch's compile cache, torchinductor_*, is meant to stay)
        left = sorted(p.name for p in temp.iterdir() if p.name.startswith(scratch.PREFIX))
        again = start_session(
            repo,
            ["--perfguard-ab=HEAD~1", "--perfguard-full", "-k", "test_small"],
            tmp / "log2.txt",
            env,
        )
        again.wait(timeout=300)
        out = (tmp / "log2.txt").read_text(errors="replace")
        stale = [name for name in left if (temp / name).exists()]
        problems = [f"left in TMPDIR after the next run: {', '.join(stale)}"] if stale else []
        if not left:
            problems.append("the killed run left nothing (killed too early to test the cleanup)")
        return Ran(again.returncode, out), problems

    cases.append(
        Case(
            "signals",
            "kill -9 of a same-job A/B run, then the next run",
            "ok",
            ab_killed,
            codes=(0, 1),
        )
    )
    return cases


FAMILIES: dict[str, Callable[[Seed], list[Case]]] = {
    "git": git_cases,
    "branch": branch_cases,
    "api": api_cases,
    "signals": signal_cases,
}
