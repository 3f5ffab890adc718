"""What baselines in an object store cost: saves, a PR run's reads, history, over real S3 calls.

Run:  .venv/bin/python -m benchmarks.object_store [--commits 200] [--results 100] [--out FILE]

Starts an S3-compatible server on 127.0.0.1 (moto's server mode, one request at a time, as
the tests do), and saves a synthetic main of `--commits` commits, each a baseline of
`--results` results, through the real save path (`ObjectStore.save`: read, merge, conditional
write of the compact record, then its summary part). The results are copies of one real
measurement of a 30-µs model at the default budget (`benchmarks.store_scale`).

It reports: the median save; a PR run's reads of the store (as `finish_run` makes them),
measured beside its base (the base's record alone) and compared with the stored baseline (the
base's record and the summary parts of the 20 baselines before it), in requests, bytes and
seconds, against one record's bytes; `perfguard history` over the whole store
(seconds); and the bytes stored per result. A local server has no network latency: on AWS,
each request costs some 10-30 ms more, and the parts are fetched concurrently.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.store_scale import cpu_model, measured_template, synthetic_run
from tests.gitrepo import git
from tests.s3server import serve

HERE = Path(__file__).resolve().parent


class Counting:
    """Counts the requests and bytes that s3fs reads, through botocore's event hooks."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0

    def attach(self, store: Any) -> None:
        fs = store.fs
        fs.connect(refresh=True)
        fs.s3.meta.events.register("after-call.s3", self.after)

    def after(self, http_response: Any, parsed: Any, model: Any, **_: Any) -> None:
        self.requests += 1
        if model.name != "HeadObject":  # a HEAD's content-length is the object's, unsent
            self.bytes += int(http_response.headers.get("content-length") or 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--results", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()

    import boto3

    from perfguard.store.history import load_history
    from perfguard.store.objects import ObjectStore

    endpoint, _stop = serve()
    os.environ.update(
        AWS_ENDPOINT_URL_S3=endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="perfguard-bench")
    url = "s3://perfguard-bench/baselines"
    template = measured_template()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="perfguard-objects-"))
    repo = work / "main"
    git(work, "init", "-q", "-b", "main", str(repo))
    saves = []
    store = ObjectStore(url)
    started = time.monotonic()
    for c in range(args.commits):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"c{c}")
        sha = git(repo, "rev-parse", "HEAD")
        run = synthetic_run(template, rng, sha, c, args.results)
        t0 = time.monotonic()
        store.save(run)
        saves.append(time.monotonic() - t0)
        if (c + 1) % 50 == 0:
            print(f"[{c + 1}/{args.commits}] {time.monotonic() - started:.0f} s", flush=True)

    record = f"cpu-bench/{sha}.json.gz"
    record_bytes = len(store.read([record])[record])
    part = f".summary/cpu-bench/{sha}.parquet"
    part_bytes = len(store.read([part])[part])

    # a PR run on top of main's tip: the reads `finish_run` makes of the store. Measured
    # beside its base (--perfguard-ab, the workflow's PR path): the base's record, context
    git(repo, "checkout", "-q", "-b", "pr")
    git(repo, "commit", "-q", "--allow-empty", "-m", "pr")
    ab = ObjectStore(url)
    ab_counting = Counting()
    ab_counting.attach(ab)
    t0 = time.monotonic()
    assert ab.load("cpu-bench", sha) is not None
    ab_s = time.monotonic() - t0
    # compared with the stored baseline: its record, and the noise floor's and trend's parts
    pr = ObjectStore(url)
    counting = Counting()
    counting.attach(pr)
    t0 = time.monotonic()
    assert pr.has("cpu-bench", sha)
    base = pr.load("cpu-bench", sha)
    history = load_history(pr, "cpu-bench", repo, start=sha, last=20)
    pr_s = time.monotonic() - t0
    assert base is not None and history["commit"].nunique() == 20

    cli = [str(Path(sys.executable).with_name("perfguard"))]
    t0 = time.monotonic()
    done = subprocess.run(
        [*cli, "history", "--dir", url], cwd=repo, capture_output=True, text=True, check=False
    )
    history_s = time.monotonic() - t0
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return 1

    figures = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs",
        "commits": args.commits,
        "results": args.results,
        "record_bytes_per_result": round(record_bytes / args.results, 1),
        "part_bytes_per_result": round(part_bytes / args.results, 1),
        "save_s_median": round(statistics.median(saves), 3),
        "save_s_max": round(max(saves), 3),
        "pr_ab_reads_requests": ab_counting.requests,
        "pr_ab_reads_bytes": ab_counting.bytes,
        "pr_ab_reads_s": round(ab_s, 3),
        "pr_reads_requests": counting.requests,
        "pr_reads_bytes": counting.bytes,
        "pr_reads_s": round(pr_s, 3),
        "pr_reads_over_one_record": round(counting.bytes / record_bytes, 1),
        "pr_ab_reads_over_one_record": round(ab_counting.bytes / record_bytes, 2),
        "history_s": round(history_s, 2),
    }
    print(json.dumps(figures, indent=1))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
