"""The `perfguard` command: the steps that need no GPU and no torch.

Exit codes: 0 fine, 1 regression found, 2 usage or input error (one line on stderr).
Each command imports what it needs when it runs: `comment` needs only the standard library,
and `baselines pull`/`push` only filelock, so the workflow's jobs that hold a write token can
install perfguard without its dependencies (and without the pull request's code).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard import __version__
from perfguard.errors import InputError
from perfguard.github import COMMENT_LIMIT
from perfguard.records import BaselineRef, RecordError, Run, VariantResult
from perfguard.store.baselines import BaselineError, BaselineStore, read_run_file, write_json_atomic

if TYPE_CHECKING:
    from perfguard.stats.verdicts import Thresholds

EXIT_OK, EXIT_REGRESSION, EXIT_INPUT = 0, 1, 2


def _percent(text: str) -> float:
    """An argparse type: a finite percentage, 0 or more (NaN would switch a gate off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of percent, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number, 0 or more, got {text!r}")
    return value


def _limit(args: argparse.Namespace) -> int | None:
    if args.max_chars < 0:
        raise InputError(f"--max-chars must be 0 (no limit) or more, got {args.max_chars}")
    return args.max_chars or None


def _render(args: argparse.Namespace, run: Run, thresholds: Thresholds | None = None) -> None:
    """The report to -o (comment-sized, the full one beside it when trimmed) or stdout."""
    from perfguard.report.markdown import render_markdown
    from perfguard.report.outputs import write_reports

    if args.output is None:
        sys.stdout.write(render_markdown(run, thresholds, limit=_limit(args)))
        return
    written = write_reports(
        run, args.output, thresholds, limit=_limit(args), step_summary=args.step_summary
    )
    print(f"wrote {args.output}", file=sys.stderr)
    if written.full is not None:
        print(f"trimmed to fit a comment; the full report: {written.full}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    run = read_run_file(args.results)
    _render(args, run)
    return EXIT_REGRESSION if args.exit_code and run.has_regression else EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from perfguard.git import git_state
    from perfguard.init import InitError, InitOptions, init, next_steps

    state = git_state(Path.cwd())
    if state is None:
        raise InputError("perfguard init writes into a git repository: run it inside one")
    options = InitOptions(
        tests=args.tests,
        labels=tuple(x.strip() for x in args.runner_labels.split(",") if x.strip()),
        shards=args.shards,
        ab=args.pr == "ab",
        main_branch=args.main_branch,
        force=args.force,
    )
    try:
        done = init(state.root, options)
    except InitError as exc:
        raise InputError(str(exc)) from None
    for path in done.created:
        print(f"created {path}")
    for path in done.replaced:
        print(f"replaced {path}")
    for line in done.updated:
        print(f"updated {line}")
    for line in done.kept:
        print(f"kept {line}")
    print("\nNext:")
    for step in next_steps(options):
        print(f"  {step}")
    return EXIT_OK


def compare_files(base: Run, head: Run, thresholds: Thresholds, base_path: Path) -> Run:
    from perfguard.stats.verdicts import compare_runs

    if base.machine != head.machine:
        raise InputError(
            f"{base_path} was measured on machine {base.machine!r}, the other file on "
            f"{head.machine!r}: perfguard never compares numbers from different machines"
        )
    reason = f"perfguard compare: {base_path.name}"
    return replace(
        head,
        baseline=BaselineRef(commit=base.commit, reason=reason),
        comparisons=compare_runs(base, head, thresholds),
    )


def cmd_compare(args: argparse.Namespace) -> int:
    from perfguard.stats.verdicts import Thresholds

    base, head = read_run_file(args.base), read_run_file(args.head)
    thresholds = Thresholds(gate_p99=args.gate_p99)
    if args.min_change is not None:
        thresholds = replace(thresholds, min_change_pct=args.min_change)
    run = compare_files(base, head, thresholds, args.base)
    if args.json is not None:
        write_json_atomic(args.json, run.to_json())
        print(f"wrote {args.json}", file=sys.stderr)
    if args.output is not None or args.json is None:
        _render(args, run, thresholds)
    return EXIT_REGRESSION if run.has_regression else EXIT_OK


def check_shards(runs: Sequence[tuple[Path, Run]]) -> None:
    """Files of a sharded run must be every shard of it, once each (a missing shard would
    make a partial run, and a partial baseline)."""
    seen: dict[int, Path] = {}
    total: int | None = None
    for path, run in runs:
        label = run.settings.get("shard")
        if label is None:
            if seen:
                raise InputError(f"{path} is not a shard, the other files are: merge one run")
            continue
        k, _, n = str(label).partition("/")
        if not (k.isdigit() and n.isdigit()):
            raise InputError(f"{path}: its shard {label!r} is not K/N")
        if total is not None and int(n) != total:
            raise InputError(f"{path} is shard {label} of a run of {total} shards, not {n}")
        if int(k) in seen:
            raise InputError(f"shard {label} is in both {seen[int(k)]} and {path}")
        total = int(n)
        seen[int(k)] = path
    if total is not None:
        if len(seen) != len(runs):
            raise InputError("some files are shards and some are not: merge one run")
        missing = [f"{k}/{total}" for k in range(1, total + 1) if k not in seen]
        if missing:
            raise InputError(
                f"shard {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing: "
                "merge needs every shard's results file (did a shard job fail?)"
            )


def merge_runs(runs: Sequence[tuple[Path, Run]]) -> Run:
    """Join shard results of one run: same commit and machine, no result measured twice."""
    check_shards(runs)
    (first_path, first), rest = runs[0], runs[1:]
    seen = {r.key: first_path for r in first.results}
    results = list(first.results)
    comparisons = list(first.comparisons)
    base_side = list(first.baseline_results)  # same-job A/B shards: each its base side
    confirm = [list(rs) for rs in first.confirm_results]  # round k of every shard together
    confirm_base = [list(rs) for rs in first.confirm_base_results]  # their A/B base sides
    warnings = list(first.health_warnings)
    for path, run in rest:
        if run.commit != first.commit:
            raise InputError(
                f"{path} is of commit {run.commit}, {first_path} of {first.commit}: "
                "only shards of one commit can be merged"
            )
        if run.machine != first.machine:
            raise InputError(
                f"{path} is of machine {run.machine!r}, {first_path} of "
                f"{first.machine!r}: only shards of one machine can be merged"
            )
        for r in run.results:
            if r.key in seen:
                raise InputError(
                    f"{r.test} [{r.variant}] is in both {seen[r.key]} and {path}: "
                    "shards must not overlap"
                )
            seen[r.key] = path
            results.append(r)
        comparisons.extend(run.comparisons)
        base_side.extend(run.baseline_results)
        _extend_rounds(confirm, run.confirm_results)
        _extend_rounds(confirm_base, run.confirm_base_results)
        warnings += [w for w in run.health_warnings if w not in warnings]
    health = {**first.health, "warnings": warnings} if warnings else dict(first.health)
    return replace(
        first,
        results=tuple(results),
        comparisons=tuple(comparisons),
        health=health,
        baseline_results=tuple(base_side),
        confirm_results=tuple(map(tuple, confirm)),
        confirm_base_results=tuple(map(tuple, confirm_base)),
    )


def _extend_rounds(
    rounds: list[list[VariantResult]], more: Sequence[Sequence[VariantResult]]
) -> None:
    """Round k of `more` joins round k of `rounds` (a shard may have made fewer rounds)."""
    for k, made in enumerate(more):
        if k == len(rounds):
            rounds.append([])
        rounds[k].extend(made)


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
        return EXIT_OK
    return _finish_merged(args, merged)


def _finish_merged(args: argparse.Namespace, merged: Run) -> int:
    """Compare the union against one baseline (one correction over the whole run), report,
    and save it as the baseline of HEAD when asked: as one unsharded run would."""
    from perfguard.confirm import replay
    from perfguard.git import git_state
    from perfguard.health import Health
    from perfguard.pipeline import FinishSettings, finish_run
    from perfguard.stats.verdicts import Thresholds

    state = git_state(Path.cwd())
    if state is None or state.head is None:
        raise InputError("merge --compare needs to run inside the git checkout of the shards")
    if merged.commit != state.head:
        raise InputError(
            f"the shards are of commit {merged.commit}, this checkout is at {state.head}: "
            "run merge in a checkout of the commit that was measured"
        )
    settings = FinishSettings(
        root=state.root,
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
    )
    outcome = finish_run(
        merged.results,
        merged.environment,
        settings,
        extra_settings={
            k: v for k, v in merged.settings.items() if k not in ("thresholds", "shard")
        },
        health=Health.from_json(merged.health),
        # the shards measured their flagged items again on the GPU; the verdicts of the
        # whole run are confirmed with those re-measures
        remeasure=(
            replay(merged.confirm_results, merged.confirm_base_results)
            if merged.confirm_results
            else None
        ),
    )
    for message in outcome.messages:
        print(message, file=sys.stderr)
    print(f"merged {len(merged.results)} results: {args.output}", file=sys.stderr)
    if outcome.error:
        raise InputError(outcome.error)
    return EXIT_REGRESSION if outcome.run.has_regression else EXIT_OK


def cmd_baselines_list(args: argparse.Namespace) -> int:
    store = BaselineStore(args.dir)
    infos = store.list(args.machine)
    if not infos:
        print(f"no baselines under {args.dir}")
        return EXIT_OK
    print(f"{'machine':<36} {'commit':<12} {'created':<26} tests")
    for info in sorted(infos, key=lambda i: (i.machine, i.created or "")):
        print(f"{info.machine:<36} {info.commit[:12]:<12} {info.created or '?':<26} {info.tests}")
    return EXIT_OK


def cmd_baselines_prune(args: argparse.Namespace) -> int:
    removed = BaselineStore(args.dir).prune(args.keep, args.machine, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for info in removed:
        print(f"{verb} {info.path}")
    print(f"{verb} {len(removed)} baseline(s), kept the {args.keep} newest of each machine")
    return EXIT_OK


def _sync_root(directory: Path) -> Path:
    from perfguard.git import git_state

    state = git_state(directory if directory.exists() else Path.cwd())
    if state is None:
        raise InputError(f"{directory} is not inside a git repository: pull and push need one")
    return state.root


def cmd_baselines_pull(args: argparse.Namespace) -> int:
    from perfguard.store.sync import SyncError, pull

    try:
        result = pull(_sync_root(args.dir), args.dir, remote=args.remote, branch=args.branch)
    except SyncError as exc:
        raise InputError(str(exc)) from None
    print(
        f"pulled {len(result.added)} baseline(s) from {args.remote}/{args.branch} into {args.dir}"
    )
    for path in result.kept:
        print(f"kept the local {path}: it differs from the branch's copy")
    for refusal in result.refused:
        print(f"perfguard: refused the branch's {refusal}", file=sys.stderr)
    return EXIT_OK


def cmd_baselines_push(args: argparse.Namespace) -> int:
    from perfguard.store.sync import SyncError, push

    try:
        result = push(_sync_root(args.dir), args.dir, remote=args.remote, branch=args.branch)
    except SyncError as exc:
        raise InputError(str(exc)) from None
    print(
        f"pushed {len(result.added)} baseline(s) to {args.remote}/{args.branch}"
        + (f" after {result.attempts} attempts" if result.attempts > 1 else "")
    )
    return EXIT_OK


def cmd_comment(args: argparse.Namespace) -> int:
    from perfguard.github import DEFAULT_API, Client, GitHubError, upsert_comment

    token = os.environ.get("GITHUB_TOKEN", "").strip()
    if not token:
        raise InputError("GITHUB_TOKEN is not set: the comment step needs a token to post with")
    if args.pr < 1:
        raise InputError(f"--pr must be a pull-request number, got {args.pr}")
    body = args.body_file.read_text(encoding="utf-8")
    client = Client(
        token,
        api=os.environ.get("GITHUB_API_URL") or DEFAULT_API,
        log=lambda line: print(line, file=sys.stderr),
    )
    try:
        posted = upsert_comment(client, args.repo, args.pr, body, author=args.author)
    except (GitHubError, ValueError) as exc:
        raise InputError(f"comment not posted: {exc}") from None
    print(
        f"{posted.action} the perfguard comment on {args.repo}#{args.pr} as {posted.author} "
        f"{posted.url}".rstrip()
    )
    if posted.duplicates:
        print(
            f"note: {posted.duplicates} older comment(s) also carry the marker; "
            "they were left as they are",
            file=sys.stderr,
        )
    if posted.foreign:
        print(
            f"note: {posted.foreign} comment(s) carrying the marker were written by someone "
            "else; they were not touched (--author names the identity to update as)",
            file=sys.stderr,
        )
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.prog}: {message}")


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-chars",
        type=int,
        default=COMMENT_LIMIT,
        help="trim the report to this many characters (default: GitHub's comment limit, "
        f"{COMMENT_LIMIT}; 0: never trim); with -o the full report is written beside it",
    )
    p.add_argument(
        "--step-summary",
        action="store_true",
        help="with -o, also append the report to $GITHUB_STEP_SUMMARY when it is set",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="perfguard", description="perfguard: the steps that need no GPU")
    parser.add_argument("--version", action="version", version=f"perfguard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("report", help="render the Markdown report from a results file")
    p.add_argument("results", type=Path)
    p.add_argument("-o", "--output", type=Path, help="write here instead of standard output")
    p.add_argument(
        "--exit-code", action="store_true", help="exit 1 when the results hold a regression"
    )
    _output_options(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="compare two results or baseline files (exit 1: regression)")
    p.add_argument("base", type=Path)
    p.add_argument("head", type=Path)
    p.add_argument("--json", type=Path, help="write the compared results here")
    p.add_argument("-o", "--output", type=Path, help="write the Markdown report here")
    p.add_argument(
        "--min-change",
        type=_percent,
        default=None,
        help="smallest latency change in percent that can be a regression (default 10)",
    )
    p.add_argument("--gate-p99", action="store_true", help="let p99 latency gate the verdict")
    _output_options(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("comment", help="create or update the one perfguard comment on a PR")
    p.add_argument("--repo", required=True, help="OWNER/NAME")
    p.add_argument("--pr", type=int, required=True, help="pull-request number")
    p.add_argument("--body-file", type=Path, required=True, help="the report to post")
    p.add_argument(
        "--author",
        help="the login the token posts as, whose comment is updated (default: asked of the "
        "API; github-actions[bot] for Actions' GITHUB_TOKEN)",
    )
    p.set_defaults(func=cmd_comment)

    p = sub.add_parser("merge", help="merge the results files of shards of one run")
    p.add_argument("files", type=Path, nargs="+")
    p.add_argument("-o", "--output", type=Path, required=True)
    p.add_argument(
        "--compare",
        metavar="REF",
        help="compare the merged run as one: auto, a git revision, or none "
        "(default: keep each shard's own comparisons)",
    )
    p.add_argument("--baseline-dir", type=Path, default=Path("baselines"))
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

    p = sub.add_parser("init", help="write the workflow, an example perf test and the settings")
    p.add_argument("--tests", default="tests/perf", help="the perf tests' folder (tests/perf)")
    p.add_argument(
        "--runner-labels",
        default="self-hosted,linux,x64,gpu",
        help="labels of the GPU runners, comma-separated (self-hosted,linux,x64,gpu)",
    )
    p.add_argument("--shards", type=int, default=2, help="GPU runners that share the suite (2)")
    p.add_argument(
        "--pr",
        choices=("ab", "stored"),
        default="ab",
        help="pull requests: measure every item beside the base commit (ab, default), or "
        "compare with the stored baseline, confirming flags beside the base commit (stored: "
        "half the GPU time, but a busy runner can fool it)",
    )
    p.add_argument("--main-branch", default="main", help="the main branch (main)")
    p.add_argument("--force", action="store_true", help="replace files that exist")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("baselines", help="stored baselines")
    bsub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    lst = bsub.add_parser("list", help="list stored baselines (machine, commit, date, tests)")
    lst.add_argument("--dir", type=Path, default=Path("baselines"), help="baseline directory")
    lst.add_argument("--machine", help="only this machine key")
    lst.set_defaults(func=cmd_baselines_list)
    prune = bsub.add_parser("prune", help="delete all but the newest N baselines per machine")
    prune.add_argument("--keep", type=int, required=True, help="how many to keep per machine")
    prune.add_argument("--dir", type=Path, default=Path("baselines"), help="baseline directory")
    prune.add_argument("--machine", help="only this machine key")
    prune.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")
    prune.set_defaults(func=cmd_baselines_prune)
    for name, func, what in (
        ("pull", cmd_baselines_pull, "bring baselines from"),
        ("push", cmd_baselines_push, "add local baselines to"),
    ):
        sp = bsub.add_parser(name, help=f"{what} a git branch of a remote")
        sp.add_argument("--dir", type=Path, default=Path("baselines"), help="baseline directory")
        sp.add_argument("--remote", default="origin", help="git remote (default origin)")
        sp.add_argument(
            "--branch",
            default="perfguard-baselines",
            help="branch holding the baselines (default perfguard-baselines)",
        )
        sp.set_defaults(func=func)

    from perfguard.history import commands as history_commands

    history_commands.register(sub)
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The parsed command line; what follows `--` goes to pytest (`perfguard bisect`)."""
    argv = list(argv)
    if "--" not in argv:
        return build_parser().parse_args(argv)
    cut = argv.index("--")
    args = build_parser().parse_args(argv[:cut])
    if not hasattr(args, "pytest_args"):
        raise InputError(f"perfguard {args.command}: takes no arguments after --")
    args.pytest_args = argv[cut + 1 :]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        code: int = args.func(args)
        return code
    except (InputError, BaselineError, RecordError) as exc:
        print(f"perfguard: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as exc:
        print(f"perfguard: error: {exc}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
