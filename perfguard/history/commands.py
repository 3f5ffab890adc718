"""`perfguard history`, `site`, `alert` and `bisect`: main's baselines read as a time series.

Only the standard library at import: `perfguard comment` builds the same parser in a job that
installs perfguard without its dependencies. Each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.errors import InputError
from perfguard.history.changepoints import DETECTED_METRICS
from perfguard.history.source import add_source_options, commit_url, load_history, repo_root
from perfguard.records import SHA

if TYPE_CHECKING:
    from perfguard.cli.common import Commands
    from perfguard.history.alert import Bisected
    from perfguard.history.bisect import Bisection


def cmd_history(args: argparse.Namespace) -> int:
    from perfguard.history.analysis import render_markdown, render_terminal, to_json
    from perfguard.history.series import dumps

    # the change points need the searched metrics alone; the JSON holds every series
    history = load_history(args, None if args.json else DETECTED_METRICS)
    sys.stdout.write(render_terminal(history))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(dumps(to_json(history)), encoding="utf-8")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        url = commit_url(args.commit_url, repo_root(args.dir))
        args.output.write_text(render_markdown(history, commit_url=url), encoding="utf-8")
    return 0


def cmd_site(args: argparse.Namespace) -> int:
    """The whole site; with `--update`, the site in the output folder brought up to main,
    reading only main's commits after its settled part (a push), or built whole where it
    cannot be (none, another format, main rewritten)."""
    from perfguard.history.site import update_site, write_site
    from perfguard.history.site_data import SiteStale, read_manifest

    root = repo_root(args.dir)
    url = commit_url(args.commit_url, root)
    if args.update:
        try:
            previous = read_manifest(args.output)
            args.window = _commits_since(root, args.main_branch, previous.reads_from())
            if args.window is not None:
                pages = update_site(load_history(args), previous, args.output, commit_url=url)
                print(
                    f"updated {len(pages)} page(s) in {args.output}: main's newest "
                    f"{args.window} commits read, {previous.settled} settled chunk(s) kept"
                )
                return 0
        except SiteStale as why:
            print(f"note: {why}: the whole site is built", file=sys.stderr)
        args.window = None
    pages = write_site(load_history(args), args.output, commit_url=url)
    print(f"wrote {len(pages)} page(s) to {args.output} (open {args.output / 'index.html'})")
    return 0


def _commits_since(root: Path | None, main_branch: str, oldest: str | None) -> int | None:
    """How many of main's newest commits reach back to `oldest` (None: all of main)."""
    from perfguard.history.series import MAX_COMMITS, main_line
    from perfguard.history.site_data import SiteStale

    if oldest is None:
        return None
    line = main_line(root, main_branch, MAX_COMMITS) or []
    if oldest not in line:
        raise SiteStale(f"the site's commit {oldest[:10]} is not on {main_branch}")
    return len(line) - line.index(oldest)


def cmd_alert(args: argparse.Namespace) -> int:
    from perfguard.github import GitHubError, client_from_env
    from perfguard.history.alert import raise_alerts
    from perfguard.history.series import MAX_COMMITS, main_line

    if args.newest < 1:
        raise InputError(f"--newest must be 1 or more, got {args.newest}")
    history = load_history(args, DETECTED_METRICS)
    regressions = history.regressions(newest=args.newest)
    client = client_from_env(args, "the alert")
    root = repo_root(args.dir)
    try:
        raised = raise_alerts(
            client,
            args.repo,
            history,
            regressions,
            line=main_line(root, args.main_branch, args.window or MAX_COMMITS) or (),
            bisected=[_bisected(path) for path in args.bisected or ()],
            commit_url=commit_url(args.commit_url, root),
            author=args.author,
        )
    except (GitHubError, ValueError) as exc:
        raise InputError(f"alert not raised: {exc}") from None
    for c in history.accepted(newest=args.newest):
        print(
            f"no alert for {c.test} [{c.variant}] {c.metric} {c.previous[:10]}..{c.commit[:10]}: "
            f"accepted at {c.accepted_at[:10]} ({c.accepted})"
        )
    if not raised:
        print(f"no regression among the newest {args.newest} commit(s) of main: no alert")
    for alert in raised:
        where = alert.url or f"{args.repo}#{alert.number}"
        print(f"{alert.action} {where} ({alert.title})")
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    from perfguard.history.bisect import PluginMeasure, commits_between, search

    if args.rounds < 1:
        raise InputError(f"--rounds must be 1 or more, got {args.rounds}")
    root = Path.cwd()
    if repo_root(root) is None:
        raise InputError("perfguard bisect runs inside the git repository of the perf tests")

    def log(line: str) -> None:
        print(f"perfguard bisect: {line}", file=sys.stderr, flush=True)

    if args.package:
        return _bisect_package(args, root, log)
    if not args.good or not args.bad:
        raise InputError(
            "perfguard bisect takes GOOD BAD (two commits), or --package NAME --good V1 --bad V2"
        )
    commits = commits_between(root, args.good, args.bad)
    log(f"{len(commits) - 1} commit(s) after {commits[0][:10]} up to {commits[-1][:10]}")
    measure = PluginMeasure(root, args.pytest_args, log)
    found = search(commits, measure, rounds=args.rounds, log=log, direction=args.direction)
    if _tell(found, args.json, log) is None:
        return 0
    evidence = [
        s
        for s in found.steps
        if s.head == found.culprit and s.base == commits[commits.index(found.culprit) - 1]
    ]
    for step in evidence[-1:]:
        print(f"evidence: {step.line()}")
    return 0


def _bisect_package(args: argparse.Namespace, root: Path, log: Callable[[str], None]) -> int:
    """`perfguard bisect --package NAME --good V1 --bad V2`: the tree fixed, the versions."""
    from perfguard.environments import default_cache
    from perfguard.history.bisect import search
    from perfguard.history.package_bisect import (
        Environments,
        PackageMeasure,
        labelled,
        versions_between,
    )

    if args.good or args.bad:
        raise InputError("--package bisects versions: give them as --good V1 --bad V2, not commits")
    if not args.good_version or not args.bad_version:
        raise InputError("--package NAME needs --good V1 and --bad V2 (two of its versions)")
    listed = [v.strip() for v in (args.versions or "").split(",") if v.strip()]
    versions = versions_between(
        args.package,
        args.good_version,
        args.bad_version,
        listed=listed,
        find_links=args.find_links,
    )
    log(
        f"{len(versions) - 1} version(s) of {args.package} after {versions[0]} up to {versions[-1]}"
    )
    environments = Environments(
        args.package, args.install, args.env_cache or default_cache(), log=log
    )
    measure = PackageMeasure(root, args.pytest_args, environments)
    found = search(
        labelled(args.package, versions),
        measure,
        rounds=args.rounds,
        log=log,
        direction=args.direction,
    )
    _tell(found, args.json, log)
    return 0


def _tell(found: Bisection, json_path: Path | None, log: Callable[[str], None]) -> str | None:
    """Write a bisection's JSON (if asked) and print its culprit and why; the culprit, or
    None: an outcome too (nothing changed that way, or no clear answer)."""
    from perfguard.history.series import dumps

    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(dumps(found.to_json()), encoding="utf-8")
    log(f"{len(found.steps)} paired measurement(s)")
    if found.culprit is not None:
        print(f"culprit: {found.culprit}")
    print(found.reason)
    return found.culprit


def _bisected(path: Path) -> Bisected:
    """The good, bad and culprit commits of a `perfguard bisect --json` file."""
    from perfguard.history.alert import Bisected

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        found = Bisected(str(data["good"]), str(data["bad"]), str(data["culprit"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not the JSON of perfguard bisect ({exc})") from None
    if not all(SHA.match(sha) for sha in (found.good, found.bad, found.culprit)):
        raise InputError(f"{path}: good, bad and culprit must be full commit shas")
    return found


def _add_bisect(sub: Commands) -> None:
    """`perfguard bisect`: over commits, or over a package's versions (`--package`)."""
    p = sub.add_parser(
        "bisect",
        usage="perfguard bisect GOOD BAD [--json OUT] [--rounds N] [-- PYTEST ARGS]\n"
        "       perfguard bisect --package NAME --good V1 --bad V2 [--versions V,V | "
        "--find-links DIR] [--install COMMAND] [--json OUT] [-- PYTEST ARGS]",
        help="find the first commit between GOOD and BAD (or version of a package between two) "
        "where the perf tests got slower",
        description="Measures commits side by side (same-job A/B) to find the first slower one. "
        "Arguments after -- go to pytest (select the perf tests at stake, e.g. -k test_mlp).",
    )
    p.add_argument("good", nargs="?", help="a commit from before the change")
    p.add_argument("bad", nargs="?", help="a later commit that has it")
    p.add_argument(
        "--package",
        metavar="NAME",
        help="bisect this dependency's versions instead, the tree fixed (with --good, --bad)",
    )
    p.add_argument("--good", dest="good_version", metavar="V1", help="a version before it")
    p.add_argument("--bad", dest="bad_version", metavar="V2", help="a later version that has it")
    p.add_argument(
        "--versions",
        metavar="V,V,...",
        help="--package: the versions to search (default: those of --find-links, else the index's)",
    )
    p.add_argument(
        "--find-links", type=Path, metavar="DIR", help="--package: a folder of its wheels"
    )
    p.add_argument(
        "--install",
        metavar="COMMAND",
        help="--package: the command that installs a version into an environment, run with the "
        "environment first on PATH ({version} and {package} are replaced); default: this "
        "environment's packages, pinned, with the package at that version",
    )
    p.add_argument(
        "--env-cache", type=Path, metavar="DIR", help="--package: where environments are kept"
    )
    p.add_argument("--json", type=Path, help="write the culprit and every step here")
    p.add_argument(
        "--direction",
        choices=("auto", "slower", "faster"),
        default="auto",
        help="the change to find: slower, faster, or auto (the direction BAD beside GOOD "
        "shows; the default)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="measure a step whose verdict is unclear up to this many times (2)",
    )
    p.set_defaults(func=cmd_bisect, pytest_args=[])  # what follows `--` (perfguard.cli.main)


def register(sub: Commands) -> None:
    """Add the history commands to `perfguard`'s subparsers."""
    from perfguard import github  # the standard library only, like this module

    p = sub.add_parser("history", help="main's per-commit series and the change points in them")
    add_source_options(p)
    p.add_argument("--json", type=Path, help="write the series and change points here")
    p.add_argument("-o", "--output", type=Path, help="write the Markdown summary here")
    p.set_defaults(func=cmd_history)

    _add_bisect(sub)

    p = sub.add_parser("site", help="write a static trend site of the baselines")
    add_source_options(p)
    p.add_argument("-o", "--output", type=Path, required=True, help="the site's folder")
    p.add_argument(
        "--update",
        action="store_true",
        help="bring the site already in --output up to main, reading only the commits after "
        "its settled part (what a push needs); built whole where there is none",
    )
    p.set_defaults(func=cmd_site)

    p = sub.add_parser("alert", help="open or update one GitHub issue per new regression on main")
    add_source_options(p)
    p.add_argument("--repo", required=True, help="OWNER/NAME")
    p.add_argument(
        "--newest",
        type=int,
        default=10,
        help="look for change points among this many newest measured commits (10)",
    )
    p.add_argument("--author", help="the login the token opens issues as (default: asked)")
    github.add_wait_option(p)
    p.add_argument(
        "--bisected",
        type=Path,
        action="append",
        metavar="JSON",
        help="a `perfguard bisect --json` file: names the culprit of a range (repeatable)",
    )
    p.set_defaults(func=cmd_alert)
