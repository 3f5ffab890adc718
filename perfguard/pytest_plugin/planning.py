"""The session's plan, made once right after collection (`perfguard.plan`), and applied.

The plugin hands the plan its options as values (`asked`: the pipeline's settings field by
field, the guarded settings, the rules, why the run measures everything), its collected perf
items and the environment the machine key is read from; it then deselects what the plan's
selection leaves out (after `-k` and `-m` chose: what the user did not ask for is not listed
as unaffected; before the shard: every shard selects alike). From then on the fixture, the
time limit, the A/B driver and the finish read the plan, and nothing resolves it again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.pytest_plugin.collection import test_id, test_of, variant_of
from perfguard.pytest_plugin.keys import tests_key
from perfguard.pytest_plugin.options import OPTIONS, Options, trace_dir
from perfguard.pytest_plugin.recording import FULL_EVENTS
from perfguard.settings import ItemSettings

if TYPE_CHECKING:
    from perfguard.pipeline import FinishSettings
    from perfguard.plan import Asked, BaseSaid, PerfItem, Plan
    from perfguard.pytest_plugin.state import SessionState


def asked(options: Options, root: Path) -> Asked:
    """What the session's options ask of its plan."""
    from perfguard.plan import Asked, option_rules
    from perfguard.settings import BY_FIELD

    sources = options.sources
    guarded = options.guarded()
    return Asked(
        settings=finish_settings(options, root=root),
        guarded_run=guarded,
        from_command_line=frozenset(
            k for k in guarded if sources.get(BY_FIELD[k].name, "").startswith("--")
        ),
        rules=option_rules(lambda name: getattr(options, name)),
        why_full=why_full(options),
        depends=tuple((options.depends or "").replace(",", " ").split()),
    )


def why_full(options: Options) -> str:
    """Why this run measures everything, whatever changed ("" where it may select)."""
    event = os.environ.get("GITHUB_EVENT_NAME", "")
    if options.save:
        return "main's run (--perfguard-save) measures everything"
    if options.full:
        return "--perfguard-full: every perf item measured"
    if event in FULL_EVENTS:
        return f"a {event} run measures everything"
    return ""


def finish_settings(o: Options, *, root: Path, machine: str = "") -> FinishSettings:
    """The pipeline's settings: each from the session's option of that meaning, or worked
    out by the session (the root; the machine, the thresholds and the comparison are the
    plan's); field by field, so that a renamed option is an error mypy sees, not a default
    taken in silence."""
    from perfguard.pipeline import FinishSettings

    return FinishSettings(
        root=root,
        baseline_dir=o.baseline_dir,
        machine=o.machine or machine,
        compare=o.compare,
        main_branch=o.main_branch,
        baseline_depth=o.baseline_depth,
        save=o.save,
        save_replace=o.save_replace,
        unsaved_reason=None,
        allow_dirty=o.allow_dirty,
        report=o.report,
        json=o.json,
        unhealthy=o.unhealthy,
        fail_on=o.fail_on,
        given=frozenset(
            s.field for s in OPTIONS if s.loosens and o.sources.get(s.name, "").startswith("--")
        ),
        confirm=o.confirm,
        traces=trace_dir(o),
    )


def perf_items(items: list[pytest.Item]) -> tuple[PerfItem, ...]:
    """The collected perf items, as the plan sees them."""
    from perfguard.plan import PerfItem

    return tuple(
        PerfItem(i.nodeid, test_of(i.nodeid), test_id(i, v), v, Path(i.path))
        for i in items
        if (v := variant_of(i)) is not None
    )


def make(
    state: SessionState,
    config: pytest.Config,
    items: list[pytest.Item],
    environment: dict[str, Any] | None,
    *,
    beside: BaseSaid | None = None,
    nothing_to_compare: str = "",
) -> Plan:
    """The session's plan, kept in `state`, and its selection applied to `items`.
    `environment`: what the machine key is read from (None: this process's)."""
    from perfguard.git import git_state_or_refusal
    from perfguard.plan import Sources, make_plan
    from perfguard.store.objects import open_store

    root = Path(config.rootpath)
    o = state.options
    perf = perf_items(items)
    tests: dict[str, ItemSettings] = config.stash[tests_key]
    if environment is None:
        environment = fallback_environment(o.device)
    state.environment = state.environment or environment
    wanted = o.compare != "none" or beside is not None
    git = git_state_or_refusal(root)[0] if wanted else None
    store = open_store(o.baseline_dir) if wanted and not nothing_to_compare else None
    plan = make_plan(
        asked(o, root),
        environment,
        tests,
        perf,
        Sources(git, store),
        beside=beside,
        nothing_to_compare=nothing_to_compare,
    )
    state.plan = plan
    if plan.keep is not None:
        kept = plan.keep
        dropped = [i for i in items if variant_of(i) is not None and i.nodeid not in kept]
        config.hook.pytest_deselected(items=dropped)
        gone = {id(i) for i in dropped}
        items[:] = [i for i in items if id(i) not in gone]
    return plan


def fallback_environment(device: str) -> dict[str, Any]:
    """What this process measures on (it imports torch)."""
    from perfguard.environment import collect_environment
    from perfguard.measure.runner import resolve_device

    try:
        return collect_environment(resolve_device(device))
    except Exception:  # no such device: describe the CPU, without torch if it will not load
        try:
            import torch

            return collect_environment(torch.device("cpu"))
        except Exception:
            from perfguard.environment import environment_without_torch

            return environment_without_torch()
