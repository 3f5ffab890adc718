"""`perfguard merge`: the results files of a run's shards, joined (and compared as one)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.cli.common import EXIT_OK, EXIT_REGRESSION, incomplete_exit
from perfguard.errors import InputError
from perfguard.files import write_json_atomic
from perfguard.records import Run
from perfguard.records.merge import merge_runs
from perfguard.store.location import location
from perfguard.store.run_file import read_run_file

if TYPE_CHECKING:
    from perfguard.cli.common import Commands
    from perfguard.pipeline import BaseMeasuredBeside, FinishSettings


def cmd_merge(args: argparse.Namespace) -> int:
    runs = [(p, read_run_file(p)) for p in args.files]
    merged = merge_runs(runs)
    if args.save_replace and not args.save:
        raise InputError("--save-replace goes with --save")
    if args.compare is None:
        if args.save or args.report:
            raise InputError("--save and --report need --compare (auto, a git revision or none)")
        write_json_atomic(args.output, merged.to_json())
        print(
            f"merged {len(runs)} file(s), {len(merged.results)} results: {args.output}",
            file=sys.stderr,
        )
        return incomplete_exit(merged) or EXIT_OK
    return _finish_merged(args, merged, runs)


def _paired_base(
    runs: Sequence[tuple[Path, Run]], merged: Run, compare: str, root: Path
) -> BaseMeasuredBeside | None:
    """Same-job A/B shards: the base side they measured beside the head (a `BaseMeasuredBeside`),
    which the whole run is compared with, paired, as one unsharded `--perfguard-ab` run would
    be. None for shards compared with a stored baseline (or `--compare none`)."""
    from perfguard.git import resolve_commit
    from perfguard.pipeline import BaseMeasuredBeside

    measured = [(path, run) for path, run in runs if run.results]
    paired = [(path, run) for path, run in measured if run.baseline.mode == "ab"]
    if not paired or compare == "none":
        return None
    if len(paired) != len(measured):
        stored = next(path for path, run in measured if run.baseline.mode != "ab")
        raise InputError(
            f"{paired[0][0]} was compared beside the base commit (same-job A/B), {stored} "
            "with a stored baseline: merge them without --compare, which keeps each shard's "
            "own comparisons"
        )
    (path, first), *rest = paired
    base = first.baseline.commit
    for other_path, other in rest:
        if other.baseline.commit != base:
            raise InputError(
                f"{path} measured base commit {base}, {other_path} {other.baseline.commit}: "
                "the shards of one A/B run measure one base commit"
            )
    if base is None:
        raise InputError(f"{path} is an A/B run without its base commit: merge without --compare")
    if compare != "auto" and resolve_commit(root, compare) != base:
        raise InputError(
            f"the shards measured {base[:10]} beside this commit (same-job A/B), not "
            f"{compare!r}: use --compare auto, which compares with what they measured"
        )
    return BaseMeasuredBeside(
        base, first.baseline.reason, merged.baseline_results, first.baseline.environment or {}
    )


def _finish_merged(args: argparse.Namespace, merged: Run, runs: Sequence[tuple[Path, Run]]) -> int:
    """Compare the union against one baseline (one correction over the whole run), report,
    and save it as the baseline of HEAD when asked: as one unsharded run would. Shards of a
    same-job A/B run are compared with the base side they measured, paired."""
    from perfguard.confirm import replay
    from perfguard.git import GitError, git_state
    from perfguard.health import Health
    from perfguard.pipeline import Measured, Steps, finish_run

    state = git_state(Path.cwd())
    if state is None or state.head is None:
        raise InputError("merge --compare needs to run inside the git checkout of the shards")
    if merged.commit != state.head:
        raise InputError(
            f"the shards are of commit {merged.commit}, this checkout is at {state.head}: "
            "run merge in a checkout of the commit that was measured"
        )
    try:
        same_job = _paired_base(runs, merged, args.compare, state.root)
    except GitError as exc:
        raise InputError(f"--compare: {exc}") from None
    settings = _merged_settings(args, merged, state.root)
    measured = Measured(
        results=merged.results,
        environment=merged.environment,
        extra_settings={
            k: v for k, v in merged.settings.items() if k not in ("thresholds", "shard")
        },
        health=Health.from_json(merged.health),
        same_job=same_job,
        cost=merged.cost,  # the runners' time; joining them here costs no GPU time
        incomplete=merged.incomplete,
        selection=merged.selection,  # every shard selected alike, before it took its share
        reach=merged.reach,
    )
    # the shards measured their flagged items again on the GPU; the verdicts of the whole
    # run are confirmed with those re-measures (beside the base commit in A/B)
    steps = Steps(
        remeasure=replay(merged.confirm_results, merged.confirm_base_results)
        if merged.confirm_results
        else None
    )
    outcome = finish_run(measured, settings, steps)
    for message in outcome.messages:
        print(message, file=sys.stderr)
    print(f"merged {len(merged.results)} results: {args.output}", file=sys.stderr)
    if outcome.error:
        raise InputError(outcome.error)
    return incomplete_exit(outcome.run) or (
        EXIT_REGRESSION if outcome.run.has_regression else EXIT_OK
    )


def _merged_settings(args: argparse.Namespace, merged: Run, root: Path) -> FinishSettings:
    """The pipeline's settings for the merged run: the shards' own thresholds and health."""
    from perfguard.pipeline import FinishSettings
    from perfguard.settings import GUARDED_RUN
    from perfguard.stats.verdicts import Thresholds

    return FinishSettings(
        root=root,
        baseline_dir=args.baseline_dir,
        machine=merged.machine,
        compare=args.compare,
        main_branch=args.main_branch,
        save=args.save,
        save_replace=args.save_replace,
        allow_dirty=True,  # the shards were measured at this commit; merge adds no code
        report=args.report,
        json=args.output,
        thresholds=Thresholds.from_json(merged.settings.get("thresholds")),
        unhealthy=str(merged.settings.get("unhealthy", "warn")),
        confirm=len(merged.confirm_results),
        option_prefix="--",  # this command's --compare and --save
        # the shards judged their own settings against the base's: their values stand
        given=frozenset(GUARDED_RUN),
    )


def register(sub: Commands) -> None:
    p = sub.add_parser("merge", help="merge the results files of shards of one run")
    p.add_argument("files", type=Path, nargs="+")
    p.add_argument("-o", "--output", type=Path, required=True)
    p.add_argument(
        "--compare",
        metavar="REF",
        help="compare the merged run as one: auto, a git revision, or none "
        "(default: keep each shard's own comparisons)",
    )
    p.add_argument("--baseline-dir", type=location, default=Path("baselines"))
    p.add_argument("--main-branch", default="main")
    p.add_argument("--report", type=Path, help="with --compare: write the Markdown report here")
    p.add_argument(
        "--save", action="store_true", help="with --compare: store it as the baseline of HEAD"
    )
    p.add_argument(
        "--save-replace",
        action="store_true",
        help="with --save: replace HEAD's stored baseline whole (default: update it, keeping "
        "the results of tests these files do not have)",
    )
    p.set_defaults(func=cmd_merge)
