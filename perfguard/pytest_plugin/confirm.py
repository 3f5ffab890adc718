"""Confirmation re-measures: flagged items measured again before their verdicts stand.

Each process runs at a speed of its own: on a shared runner, identical code measured in
two processes differs by a few percent, for minutes at a time, and the repeats inside one
process cannot show it. Against a stored baseline that offset, the baseline's and this
run's, is what makes false alarms. So before a latency regression or improvement stands,
the items that carry one are measured again in a child pytest session of this rootdir
(`--perfguard-confirm=N` times): beside the base commit (same-job A/B, `--perfguard-ab`)
when this repository has that commit, so a slow spell of the host hits both sides alike;
otherwise alone in a fresh process, no sooner than `--perfguard-confirm-gap` later.
`confirm_verdicts` keeps only what every re-measure shows again.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from perfguard.confirm import ConfirmRound, Remeasure
from perfguard.git import GitError, resolve_commit
from perfguard.orders import Orders, child_environment
from perfguard.pytest_plugin.options import Options
from perfguard.records import RecordError, Run, VariantResult

TIMEOUT_BASE_S = 1800.0
TIMEOUT_PER_ITEM_S = 600.0  # a max-autotune compile on a cold cache can take minutes


ChildRunner = Callable[[Path, Sequence[str], Mapping[tuple[str, str], str]], ConfirmRound]
"""(rootdir, pytest arguments, {key: node id}) -> the child session's results (and, in
A/B, the base side's)."""


def remeasurer(
    config: pytest.Config,
    options: Options,
    nodeids: Mapping[tuple[str, str], str],
    measured_at: Mapping[str, float],
    say: Callable[[str], None],
    *,
    run_child: ChildRunner | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    orders: Orders | None = None,
    sites: bool = False,
) -> Remeasure:
    """A `Remeasure` that runs the flagged items' test items in a child pytest session.

    Beside the base commit (A/B) when it is in this repository. Otherwise alone, starting
    no sooner than `options.confirm_gap_s` after the last of those items was measured (or
    re-measured): a slowdown of the host lasts seconds to minutes, and must not hit both.
    `orders`: what the child sessions are told besides; `sites`: they record allocation
    sites (then nothing is timed against anything, and nothing waits).
    """
    root = Path(config.rootpath)
    # the child reads the same ini file and loads the same plugins as this session
    extra = ["-c", str(config.inipath)] if config.inipath else []
    extra += plugin_args(config.invocation_params.args)
    child = run_child or functools.partial(_run_child, orders=orders)
    rounds = 0
    last_end = -math.inf

    def remeasure(
        keys: Sequence[tuple[str, str]],
        base_commit: str | None,
        undecided: Sequence[tuple[str, str]] = (),
    ) -> ConfirmRound:
        nonlocal rounds, last_end
        ab = _known_commit(root, base_commit)
        # only a measure beside the base commit can settle what the stored one left open
        wanted = [*keys, *(undecided if ab is not None else ())]
        items = {key: nodeids[key] for key in wanted if key in nodeids}
        if not items:
            return ConfirmRound(())
        rounds += 1
        flagged = [key for key in keys if key in items]
        if ab is None and not sites:
            latest = max([last_end, *(measured_at.get(i, -math.inf) for i in items.values())])
            wait = options.confirm_gap_s - (clock() - latest)
            if wait > 0:
                say(f"waiting {wait:.0f}s before re-measuring (--perfguard-confirm-gap)")
                sleep(wait)
        where = "in a fresh process" if ab is None else f"beside the base commit {ab[:10]} (A/B)"
        open_ = f" and {len(items) - len(flagged)} undecided" if len(items) > len(flagged) else ""
        say(
            (
                f"confirming {len(flagged)} flagged{open_} item(s) {where} "
                f"({rounds} of {options.confirm})"
                if not sites
                else f"recording the allocation sites of {len(flagged)} item(s) {where}"
            )
            + f": {', '.join(items.values())}"
        )
        _release_device_memory()
        began = clock()
        made = child(root, [*_child_args(options, root, ab, sites), *extra], items)
        last_end = clock()
        failed = sum(r.status != "ok" for r in made.results)
        say(
            f"re-measured in {last_end - began:.1f}s"
            + (f"; {failed} could not be measured" if failed else "")
        )
        return made

    return remeasure


def _child_args(options: Options, root: Path, ab: str | None, sites: bool) -> list[str]:
    """A re-measure's own arguments: beside the base commit `ab` (or alone), or the same
    tree in the two environments again (`--perfguard-ab-env`); recording sites decides
    nothing from the timing, so one block is enough there."""
    repeats = 1 if sites else options.repeats
    if options.ab_env:
        return [*options.measuring_args(root, repeats), f"--perfguard-ab-env={options.ab_env}"]
    return options.measuring_args(root, repeats, ab=ab)


def _known_commit(root: Path, commit: str | None) -> str | None:
    """`commit` when this repository holds it (a shallow clone may not): A/B can check it
    out."""
    if commit is None:
        return None
    try:
        return resolve_commit(root, commit)
    except GitError:
        return None


def plugin_args(args: Sequence[str]) -> list[str]:
    """The `-p NAME` options of a command line (also written `-pNAME`)."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "-p" and i + 1 < len(args):
            out += ["-p", args[i + 1]]
        elif arg.startswith("-p") and len(arg) > 2:
            out += ["-p", arg[2:]]
    return out


def _run_child(
    root: Path,
    args: Sequence[str],
    items: Mapping[tuple[str, str], str],
    orders: Orders | None = None,
) -> ConfirmRound:
    with tempfile.TemporaryDirectory(prefix="perfguard-confirm-") as tmp:
        out, log = Path(tmp) / "results.json", Path(tmp) / "pytest.log"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            *args,
            f"--perfguard-json={out}",
            f"--perfguard-report={Path(tmp) / 'report.md'}",
            "--perfguard-fail-on=never",
            *items.values(),
        ]
        timeout = TIMEOUT_BASE_S + TIMEOUT_PER_ITEM_S * len(items)
        try:
            with log.open("wb") as sink:
                # a round re-measures latency: its compiles may load main's artifacts
                told = child_environment((orders or Orders()).with_(compile_cache="load"))
                code = subprocess.run(
                    cmd, cwd=root, env=told, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout
                ).returncode
        except subprocess.TimeoutExpired:
            return _failed(items, f"the re-measure process ran past {timeout:.0f}s")
        except OSError as exc:
            return _failed(items, f"the re-measure process could not start: {exc}")
        try:
            run = Run.from_json(json.loads(out.read_text(encoding="utf-8")))
        except (OSError, ValueError, RecordError):
            lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            last = lines[-1] if lines else "no output"
            return _failed(
                items, f"the re-measure process wrote no results (exit code {code}): {last}"
            )
    got = {r.key: r for r in run.results}
    return ConfirmRound(
        tuple(
            got.get(key) or _error(key, "the re-measure process did not measure it")
            for key in items
        ),
        tuple(r for r in run.baseline_results if r.key in items),
    )


def _failed(items: Mapping[tuple[str, str], str], why: str) -> ConfirmRound:
    return ConfirmRound(tuple(_error(key, why) for key in items))


def _error(key: tuple[str, str], why: str) -> VariantResult:
    return VariantResult(test=key[0], variant=key[1], status="error", error=why)


def _release_device_memory() -> None:
    """What this session still holds on the GPU would crowd the child's measurements."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        with contextlib.suppress(RuntimeError):
            torch.cuda.empty_cache()
