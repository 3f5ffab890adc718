"""Main's history at scale, quickly: a long main synthesized from a few real saves.

Run:  .venv/bin/python benchmarks/history_scale.py [--commits 10000] [--results 200]
          [--sample 10] [--keep 50] [--layout months|parts] [--window 300] [--dir DIR]
          [--source CHECKOUT] [--skip-full] [--skip-site] [--out FILE]

`store_scale.py` saves and pushes every commit (hours for 10,000). Here `--sample` commits'
baselines of `--results` results go through the real save path (`BaselineStore.save`: the
compact record, gzip, its summary part; the results are copies of one real measurement, as
there), and main's `--commits` commits are made in one `git fast-import`. Each commit's rows
are a sample's part with that commit's id and date (a month of main is 1,000 commits: about
30 a day), and the baselines branch is what `baselines retain --keep N` leaves after every
push: the records and parts of the `--keep` newest commits (the records rewritten with their
commit's id), and the rest of the summary folded into one file per month (`--layout months`),
or left in parts of their own as before folding existed (`--layout parts`: the old path).

It times, each in a new interpreter: `perfguard history` and `perfguard site` on the branch
(the site of main but its newest three commits: the site the last push left); a push's path
(`history --window` and `alert --window`, against a local stand-in for GitHub, and `site
--update`, which brings that site up to main);
and a pull request's `perfguard baselines pull --for auto --history 20` on a fresh clone; and
reports the branch's packed size per commit and per result. A second call with the same
`--dir` times again without building; `--source` times another checkout's perfguard (the old
path: a worktree of the commit before the month files, on `--layout parts`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.store_scale import (
    CLI,
    ENV,
    cpu_model,
    measured_template,
    packed_mb,
    pr_fetch,
    scratch_main,
    synthetic_run,
    timed,
)
from tests.gitrepo import git

HERE = Path(__file__).resolve().parent
MACHINE = "cpu-bench"
PER_MONTH = 1000


def main_commits(repo: Path, commits: int) -> list[str]:
    """`commits` empty commits on main, oldest first, in one `git fast-import`."""
    lines = []
    for i in range(commits):
        message = f"c{i}".encode()
        lines.append(b"commit refs/heads/main\n")
        # the date its baseline's rows carry: a push's window finds their month files by it
        lines.append(b"committer bench <bench@localhost> %d +0000\n" % stamp(i))
        lines.append(b"data %d\n%s\n" % (len(message), message))
        if i == 0:
            lines.append(b"from refs/heads/main^0\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=b"".join(lines), check=True)
    return git(repo, "rev-list", "--first-parent", "--reverse", "main").split()[1:]


def created(i: int) -> str:
    """Commit `i`'s date: `PER_MONTH` commits a month from January 2026."""
    month = i // PER_MONTH
    day = 1 + (i % PER_MONTH) * 27 // PER_MONTH
    return f"{2026 + month // 12}-{1 + month % 12:02d}-{day:02d}T12:00:00+00:00"


def stamp(i: int) -> int:
    """Commit `i`'s date as git writes it: `created(i)`, in seconds since the epoch."""
    from datetime import datetime

    return int(datetime.fromisoformat(created(i)).timestamp())


def samples(directory: Path, count: int, results: int) -> list[tuple[Any, bytes]]:
    """(part table, record bytes) of `count` real saves."""
    import random

    from perfguard.store import BaselineStore
    from perfguard.store.summary import part_path, read_part

    template = measured_template()
    rng = random.Random(0)
    store = BaselineStore(directory / "sample")
    out = []
    for s in range(count):
        run = synthetic_run(template, rng, f"{s + 1:040x}", s, results)
        store.save(run)
        part = part_path(directory / "sample", MACHINE, run.commit)
        record = store.path(MACHINE, run.commit)
        out.append((read_part(part.read_bytes(), str(part)), record.read_bytes()))
    return out


def rows_for(table: Any, sha: str, when: str, record: str, index: int) -> Any:
    """A sample's rows as commit `index`'s: its id, date and record, and each timed figure
    moved by noise of its own (1% lognormal), so that no series repeats the samples' cycle."""
    import numpy as np

    out = table.copy()
    for column, value in (("commit", sha), ("created", when), ("record", record)):
        out[column] = value
    timed = out["metric"].astype(str).str.startswith("latency_p").to_numpy()
    noise = np.random.default_rng(index).lognormal(0.0, 0.01, int(timed.sum()))
    for column in ("value", "low", "high"):
        values = out[column].to_numpy(dtype=float).copy()
        values[timed] *= noise
        out[column] = values
    return out


def record_for(content: bytes, sha: str, when: str) -> bytes:
    doc = json.loads(gzip.decompress(content))
    doc["commit"], doc["created"] = sha, when
    return gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0)


def branch_files(
    shas: list[str], sampled: list[tuple[Any, bytes]], keep: int, layout: str, scratch: Path
) -> dict[str, Path]:
    """path -> a file holding its content: the baselines branch after `retain --keep` on
    every push. A month file is made when its month is complete, so that a decade of main
    is never in memory at once."""
    import pandas as pd

    from perfguard.store.months import month_bytes, month_of, month_path
    from perfguard.store.summary import TEXT_COLUMNS, blob_id, part_bytes_of

    scratch.mkdir(exist_ok=True)
    files: dict[str, Path] = {}

    def put(path: str, content: bytes) -> None:
        local = scratch / str(len(files))
        local.write_bytes(content)
        files[path] = local

    def fold(month: str, tables: list[Any]) -> None:
        whole = pd.concat(tables, ignore_index=True)
        for column in TEXT_COLUMNS:
            whole[column] = whole[column].astype(object)
        put(month_path(MACHINE, month), month_bytes([whole]))
        print(f"{month}: {len(tables)} commits folded", flush=True)

    old = len(shas) - keep
    month = ""
    tables: list[Any] = []
    for i, sha in enumerate(shas):
        table, record = sampled[i % len(sampled)]
        when = created(i)
        if i >= old:  # kept: its record, its own part
            content = record_for(record, sha, when)
            put(f"{MACHINE}/{sha}.json.gz", content)
            rows = rows_for(table, sha, when, blob_id(content), i)
            put(f".summary/{MACHINE}/{sha}.parquet", part_bytes_of(rows))
        elif layout == "parts":
            rows = rows_for(table, sha, when, blob_id(record), i)
            put(f".summary/{MACHINE}/{sha}.parquet", part_bytes_of(rows))
        else:
            if month_of(when) != month and tables:
                fold(month, tables)
                tables = []
            month = month_of(when)
            tables.append(rows_for(table, sha, when, blob_id(record), i))
        if (i + 1) % 1000 == 0:
            print(f"[{i + 1}/{len(shas)}] rows made", flush=True)
    if tables:
        fold(month, tables)
    return files


def write_branch(remote: Path, scratch: Path, files: dict[str, Path]) -> None:
    """The branch as one commit with `files`, written with git's plumbing into `remote`."""
    done = subprocess.run(
        ["git", "hash-object", "-w", "--stdin-paths"],
        cwd=remote,
        input="\n".join(str(f) for f in files.values()) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    ids = done.stdout.split()
    index = {**ENV, "GIT_INDEX_FILE": str(scratch / "index"), "GIT_DIR": str(remote)}
    info = "".join(f"100644 {blob}\t{path}\n" for path, blob in zip(files, ids, strict=True))
    plumbing = {"env": index, "capture_output": True, "text": True, "check": True}
    subprocess.run(["git", "update-index", "--index-info"], input=info, **plumbing)  # type: ignore[call-overload]
    tree = subprocess.run(["git", "write-tree"], **plumbing).stdout.strip()  # type: ignore[call-overload]
    message = ["git", "commit-tree", tree, "-m", "perfguard: synthesized"]
    commit = subprocess.run(message, **plumbing).stdout.strip()  # type: ignore[call-overload]
    git(remote, "update-ref", "refs/heads/perfguard-baselines", commit)


PUSHED = 3  # commits a push adds to the site the last push left


def push_path(repo: Path, branch: list[str], directory: Path, window: int) -> dict[str, float]:
    """What the workflow runs on a push after its baseline is stored, the site aside (`main`
    times its update): `perfguard history --window` and `perfguard alert --window` (against
    a local stand-in for GitHub's API, started here)."""
    from tests.github_fake import FakeGitHub

    limit = ["--window", str(window)]
    out = directory / "push"
    history = [
        *CLI,
        "history",
        *branch,
        *limit,
        "--json",
        str(out / "h.json"),
        "-o",
        str(out / "h.md"),
    ]
    seconds = {"history_s": round(timed(history, repo), 2)}
    with FakeGitHub() as fake:
        env = {**ENV, "GITHUB_TOKEN": fake.token, "GITHUB_API_URL": fake.url}
        started = time.monotonic()
        subprocess.run(
            [*CLI, "alert", *branch, *limit, "--repo", fake.repo],
            cwd=repo,
            env=env,
            check=True,
            capture_output=True,
        )
        seconds["alert_s"] = round(time.monotonic() - started, 2)
    seconds["both_s"] = round(seconds["history_s"] + seconds["alert_s"], 2)
    return seconds


def build(doc: dict[str, Any], args: argparse.Namespace, directory: Path) -> None:
    """Main's commits in `directory/main`, its remote with the baselines branch."""
    started = time.monotonic()
    remote, repo = scratch_main(directory)
    shas = main_commits(repo, args.commits)
    git(repo, "push", "-q", "origin", "main")
    sampled = samples(directory, args.sample, args.results)
    files = branch_files(shas, sampled, args.keep, args.layout, directory / "blobs")
    write_branch(remote, directory, files)
    doc["build_s"] = round(time.monotonic() - started, 1)
    doc["branch_files"] = len(files)
    doc["branch_mb"] = round(packed_mb(remote), 2)
    doc["branch_kb_per_commit"] = round(doc["branch_mb"] * 1024 / args.commits, 2)
    doc["branch_bytes_per_result"] = round(doc["branch_mb"] * 2**20 / args.commits / args.results)
    (directory / "build.json").write_text(json.dumps(doc))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--results", type=int, default=200)
    parser.add_argument("--sample", type=int, default=10)
    parser.add_argument("--keep", type=int, default=50)
    parser.add_argument("--layout", choices=("months", "parts"), default="months")
    parser.add_argument("--dir", type=Path, help="a second call with the same folder times again")
    parser.add_argument("--skip-site", action="store_true", help="time no trend site")
    parser.add_argument("--skip-full", action="store_true", help="time no whole history")
    parser.add_argument("--window", type=int, default=300, help="a push's --window (300)")
    parser.add_argument(
        "--source",
        type=Path,
        help="time the perfguard of this checkout (a worktree of an older commit: the old "
        "path, on --layout parts), with this environment's packages; no push path",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="perfguard-history-"))
    directory.mkdir(parents=True, exist_ok=True)
    repo = directory / "main"
    doc: dict[str, Any] = {
        "commits": args.commits,
        "results": args.results,
        "layout": args.layout,
        "keep": args.keep,
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
    }
    if not (directory / "build.json").exists():
        build(doc, args, directory)
    doc = {**json.loads((directory / "build.json").read_text()), "date": doc["date"]}
    if args.source is not None:
        ENV["PYTHONPATH"] = str(args.source.resolve())  # what every timed command runs
        doc["source"] = str(args.source)
    print(json.dumps(doc), flush=True)
    fetch = "+perfguard-baselines:refs/remotes/origin/perfguard-baselines"
    git(repo, "fetch", "-q", "origin", fetch)
    branch = ["--branch", "origin/perfguard-baselines"]
    if not args.skip_full:
        whole = [*CLI, "history", *branch, "-o", str(directory / "h.md")]
        doc["history_s"] = round(timed(whole, repo), 2)
        print(f"history {doc['history_s']} s", flush=True)
    site_dir = directory / "site"
    if not args.skip_site:  # the site of main but its newest commits: the last push's site
        earlier = [] if args.source is not None else ["--main-branch", f"main~{PUSHED}"]
        site = [*CLI, "site", *branch, *earlier, "-o", str(site_dir)]
        doc["site_s"] = round(timed(site, repo), 2)
        print(f"site {doc['site_s']} s", flush=True)
    if args.source is None:
        doc["push"] = push_path(repo, branch, directory, args.window)
        if not args.skip_site:  # this push's update of it: its newest commits added
            update = [*CLI, "site", *branch, "--update", "-o", str(site_dir)]
            doc["push"]["site_update_s"] = round(timed(update, repo), 2)
            doc["push"]["with_site_s"] = round(
                doc["push"]["both_s"] + doc["push"]["site_update_s"], 2
            )
        print(f"a push's history, alert and site update: {doc['push']}", flush=True)
    if args.source is None:  # (an older perfguard refuses this one's records: schema 14)
        doc["pr_fetch"] = pr_fetch(directory, f"pr{time.monotonic_ns()}", 20)
    old = "-before" if args.source is not None else ""
    name = f"history-scale-{doc['commits']}x{doc['results']}-{doc['layout']}{old}.json"
    out = args.out or HERE / "data" / name
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
