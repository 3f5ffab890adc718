"""What the baselines branch costs after a long main: sizes, a PR run's fetch, history, push.

Run:  .venv/bin/python benchmarks/store_scale.py [--commits 1000] [--results 1000]
          [--keep 50] [--dir DIR] [--out FILE]

A synthetic main of `--commits` commits in a scratch repository with a bare remote (as
GitHub serves it: a fetch may leave file contents out). Each commit's baseline of
`--results` results goes through the real save path (`BaselineStore.save`: the compact record,
gzip, its summary part) and the real push (`perfguard.store.sync.push`), one push per commit.
The results are copies of one real measurement of a 30-µs model at the default budget (its
metrics, counters, details, per-repeat summaries and sketch of its ~25,000 samples), each with
its own test name and its figures scaled by a random factor per commit.

It reports: bytes per result of a record and of a summary part, on disk; the branch's packed
size after all commits (`git gc` on the remote), and after `perfguard baselines retain --keep`;
a PR run's `perfguard baselines pull --for auto` on a fresh clone (seconds, and bytes fetched:
the private repository's pack); `perfguard history` and `perfguard site` on the branch
(seconds); and the median push.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.gitrepo import git

HERE = Path(__file__).resolve().parent
CLI = [str(Path(sys.executable).with_name("perfguard"))]
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def cpu_model() -> str:
    for line in (
        Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    ):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def measured_template() -> Any:
    """One real result: a 30-µs model (a small Linear) at the default budget, on this CPU."""
    import torch
    from torch import nn

    from perfguard.measure.job import Job, MeasureSettings
    from perfguard.measure.runner import measure_model

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).eval()
    return measure_model(Job.of(model, (torch.randn(8, 64),), "eager", MeasureSettings(), test="t"))


def scaled(template: Any, test: str, factor: float) -> Any:
    """`template` as another test whose times are `factor` times the template's."""
    from perfguard.records import Metrics
    from perfguard.records.sketch import BlockStats, QuantileSketch

    compact = template.compact()
    stats, sketch = compact.block_stats, compact.sketch
    latency = {
        k: v * factor
        for k, v in compact.metrics.to_json().items()
        if k.startswith("latency_") and k.endswith("_ms") and v is not None
    }
    shift = round(math.log(factor) / math.log(sketch.gamma))
    return replace(
        compact,
        test=test,
        metrics=Metrics.from_json({**compact.metrics.to_json(), **latency}),
        block_stats=BlockStats(
            sizes=stats.sizes,
            quantiles=tuple((q, tuple(v * factor for v in vs)) for q, vs in stats.quantiles),
        ),
        sketch=QuantileSketch(sketch.accuracy, sketch.offset + shift, sketch.counts, sketch.zeros),
    )


def synthetic_run(template: Any, rng: random.Random, sha: str, index: int, results: int) -> Any:
    """Commit `index`'s baseline: `results` copies of `template`, each its own test, scaled
    by a random factor."""
    from perfguard.records import BaselineRef, Run

    return Run(
        commit=sha,
        machine="cpu-bench",
        environment={"python": platform.python_version(), "device": "cpu"},
        results=tuple(
            scaled(template, f"tests/test_models.py::test_model_{i}", rng.uniform(0.97, 1.03))
            for i in range(results)
        ),
        baseline=BaselineRef(commit=None, reason="not compared"),
        created=f"2026-01-01T00:00:{index % 60:02d}+00:00",
    )


def scratch_main(directory: Path) -> tuple[Path, Path]:
    """(remote, clone): a bare remote that serves as GitHub does (a fetch may leave file
    contents out), and a clone of it with main's first commit."""
    remote, repo = directory / "remote.git", directory / "main"
    git(directory, "init", "-q", "--bare", "-b", "main", str(remote))
    git(remote, "config", "uploadpack.allowFilter", "true")
    git(remote, "config", "uploadpack.allowAnySHA1InWant", "true")
    git(directory, "clone", "-q", str(remote), str(repo))
    (repo / ".gitignore").write_text("baselines/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "init")
    return remote, repo


def build(directory: Path, commits: int, results: int, seed: int) -> dict[str, Any]:
    from perfguard.store import BaselineStore
    from perfguard.store.sync import push

    _, repo = scratch_main(directory)
    template = measured_template()
    rng = random.Random(seed)
    store = BaselineStore(repo / "baselines")
    pushes, saves = [], []
    started = time.monotonic()
    for c in range(commits):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"c{c}")
        sha = git(repo, "rev-parse", "HEAD")
        run = synthetic_run(template, rng, sha, c, results)
        t0 = time.monotonic()
        store.save(run)
        t1 = time.monotonic()
        push(repo, repo / "baselines")
        pushes.append(time.monotonic() - t1)
        saves.append(t1 - t0)
        # the runner of the next commit starts from a clean folder, as a CI job does
        for f in (repo / "baselines").rglob("*"):
            if f.is_file() and f.name != ".perfguard.lock":
                f.unlink()
        if (c + 1) % 50 == 0:
            spent = time.monotonic() - started
            print(f"[{c + 1}/{commits}] {spent:.0f} s", flush=True)
    git(repo, "push", "-q", "origin", "HEAD:main")
    last = store.path("cpu-bench", sha)
    store.save(run)
    part = repo / "baselines" / ".summary" / "cpu-bench" / f"{sha}.parquet"
    return {
        "record_bytes_per_result": last.stat().st_size / results,
        "part_bytes_per_result": part.stat().st_size / results,
        "save_s_median": statistics.median(saves),
        "push_s_median": statistics.median(pushes),
        "push_s_max": max(pushes),
    }


def packed_mb(git_dir: Path) -> float:
    for _attempt in range(30):  # the remote's own automatic gc may still hold its lock
        done = subprocess.run(["git", "gc", "-q", "--prune=now"], cwd=git_dir, env=ENV)
        if done.returncode == 0:
            break
        time.sleep(2)
    stats = dict(line.split(": ") for line in git(git_dir, "count-objects", "-v").splitlines())
    return (int(stats["size-pack"]) + int(stats["size"])) / 1024


def timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=cwd, env=ENV, check=True, capture_output=True)
    return time.monotonic() - t0


def pr_fetch(directory: Path, name: str, history: int) -> dict[str, float]:
    """A PR branched off main~2: `pull --for auto --history N` in a fresh clone (0: what a
    PR measured beside its base reads, its base's record; 20: a run compared with the stored
    baseline, with the noise floor and trend of the 20 baselines before it)."""
    pr = directory / f"{name}-{history}"
    git(directory, "clone", "-q", str(directory / "remote.git"), str(pr))
    git(pr, "checkout", "-q", "-b", "feature", "main~2")
    git(pr, "commit", "-q", "--allow-empty", "-m", "feature")
    pull = [*CLI, "baselines", "pull", "--for", "auto", "--history", str(history)]
    seconds = timed(pull, pr)
    cache = pr / ".git" / "perfguard" / "baselines.git"
    record = next((pr / "baselines").glob("*/*.json.gz"))
    return {
        "seconds": seconds,
        "fetched_mb": packed_mb(cache),
        "one_record_mb": record.stat().st_size / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--results", type=int, default=1000)
    parser.add_argument("--keep", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--skip-history", action="store_true", help="time neither history nor site")
    parser.add_argument("--out", type=Path, default=HERE / "data" / "store-scale.json")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="perfguard-scale-"))
    directory.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "commits": args.commits,
        "results": args.results,
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
    }
    built = directory / "build.json"  # a second call with the same --dir measures again
    if not built.exists():
        built.write_text(json.dumps(build(directory, args.commits, args.results, args.seed)))
    doc |= json.loads(built.read_text())
    remote, repo = directory / "remote.git", directory / "main"
    doc["branch_mb"] = packed_mb(remote)
    doc["pr_fetch"] = {n: pr_fetch(directory, "pr", n) for n in (0, 20)}
    git(repo, "fetch", "-q", "--depth=1", "origin", "perfguard-baselines")
    branch = ["--branch", "FETCH_HEAD"]
    if not args.skip_history:
        doc["history_s"] = timed([*CLI, "history", *branch, "-o", str(directory / "h.md")], repo)
        doc["site_s"] = timed([*CLI, "site", *branch, "-o", str(directory / "site")], repo)
    doc["retain_s"] = timed([*CLI, "baselines", "retain", "--keep", str(args.keep)], repo)
    doc["branch_mb_retained"] = packed_mb(remote)
    doc["pr_fetch_retained"] = {n: pr_fetch(directory, "pr2", n) for n in (0, 20)}
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
