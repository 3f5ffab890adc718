"""pytest glue: options, the `perfguard` fixture and marker, one item per variant, session end.

Registered through the `pytest11` entry point `perfguard`. Importing this module is cheap:
torch and the measuring library load only when a perf item runs with `--perfguard`.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from pathlib import Path
from typing import Any

import pytest

from perfguard import PerfguardWarning
from perfguard.pytest_plugin import same_job
from perfguard.pytest_plugin.benchmark_bridge import result_from_benchmark
from perfguard.pytest_plugin.fixture import PerfguardFixture, SessionState, trace_dir
from perfguard.pytest_plugin.marker import HELP as MARKER_HELP
from perfguard.pytest_plugin.marker import MarkerSettings, read_marker
from perfguard.pytest_plugin.options import Options, add_options, resolve
from perfguard.pytest_plugin.progress import ProgressWriter
from perfguard.records import VariantResult
from perfguard.variants.spec import DEFAULT_VARIANTS

VARIANT_PARAM = "_perfguard_variant"
SKIP_REASON = "perf test: measured only with --perfguard (run `pytest --perfguard`)"
state_key = pytest.StashKey[SessionState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _xdist_workers(config: pytest.Config) -> int:
    if hasattr(config, "workerinput"):
        return 2  # we are inside an xdist worker
    try:
        n = config.getoption("numprocesses")
    except ValueError:
        return 0
    if n in (None, 0, "0"):
        return 0
    return 2 if not isinstance(n, int) else n


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    options = resolve(config)
    if options.enabled and _xdist_workers(config) > 0:
        raise pytest.UsageError(
            "--perfguard cannot run under pytest-xdist (-n): measurements on one device must "
            "not overlap. Run the perf tests in one process (drop -n, or add -p no:xdist), "
            "and shard across machines instead (see the README, 'Sharding')"
        )
    if options.enabled and options.save and not options.worker:
        from perfguard.git import git_state
        from perfguard.pipeline import check_can_save

        refusal = check_can_save(git_state(Path(config.rootpath)), options.allow_dirty)
        if refusal:
            raise pytest.UsageError(refusal)
    state = SessionState(options, ProgressWriter(config, options.progress))
    from perfguard.measure.callgrind import CallgrindError, build_shim, regions_from_env

    state.counting = regions_from_env()
    if options.enabled and options.instructions and state.counting is None:
        try:  # asked for and impossible here: say so before anything is measured
            build_shim()
        except CallgrindError as exc:
            raise pytest.UsageError(f"--perfguard-instructions: {exc}") from None
    if options.worker:
        from perfguard.ab.worker import WorkerLink

        state.worker = WorkerLink.from_env()
    config.stash[state_key] = state


def _variants_for(options: Options, marker: MarkerSettings) -> tuple[str, ...]:
    """Command line > marker > ini > built-in default."""
    if options.variants is not None and options.variants_source.startswith("--"):
        return options.variants
    if marker.variants is not None:
        return marker.variants
    if options.variants is not None:
        return options.variants
    return DEFAULT_VARIANTS


def _test_name(metafunc_or_item: Any) -> str:
    return str(
        metafunc_or_item.definition.nodeid
        if hasattr(metafunc_or_item, "definition")
        else metafunc_or_item.nodeid
    )


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perfguard" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash[state_key]
    test = _test_name(metafunc)
    marker = read_marker(test, metafunc.definition.get_closest_marker("perfguard"))
    variants = _variants_for(state.options, marker)
    if marker.thresholds:
        state.per_test_thresholds[test] = marker.thresholds
    metafunc.parametrize(VARIANT_PARAM, variants, ids=list(variants))


def test_id(item: pytest.Item, variant: str) -> str:
    """The node id without the variant part: the `test` of a result."""
    nodeid = item.nodeid
    head, sep, params = nodeid.partition("[")
    if not sep:
        return nodeid
    params = params[:-1]
    if params == variant:
        return head
    if params.endswith("-" + variant):
        return f"{head}[{params[: -len(variant) - 1]}]"
    if params.startswith(variant + "-"):
        return f"{head}[{params[len(variant) + 1 :]}]"
    return nodeid


def _variant_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    value = callspec.params.get(VARIANT_PARAM)
    return None if value is None else str(value)


def shard_items(
    items: list[pytest.Item], k: int, n: int
) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """(kept, deselected) for shard k of n: perf tests dealt round-robin in sorted order.

    Every variant of a test goes to the same shard; items that are not perf tests stay in
    every shard. The deal depends only on the collected test ids, so the N shard jobs agree.
    """
    tests = sorted({test_id(item, v) for item in items if (v := _variant_of(item)) is not None})
    mine = {t for i, t in enumerate(tests) if i % n == k - 1}
    kept, dropped = [], []
    for item in items:
        variant = _variant_of(item)
        if variant is None or test_id(item, variant) in mine:
            kept.append(item)
        else:
            dropped.append(item)
    return kept, dropped


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[state_key]
    if state.worker is not None:
        kept, dropped = same_job.order_items(state.worker, items)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        state.worker.send("collected", items=[i.nodeid for i in kept])
        return
    if state.options.enabled:
        if state.options.shard is not None:
            kept, dropped = shard_items(items, *state.options.shard)
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = kept
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if _variant_of(item) is not None:
            item.add_marker(skip)


@pytest.fixture(name=VARIANT_PARAM)
def _perfguard_variant() -> str:
    """Replaced by the variant of each item (pytest_generate_tests parametrizes it)."""
    raise RuntimeError("perf tests are parametrized by variant; this default never runs")


@pytest.fixture
def perfguard(request: pytest.FixtureRequest, _perfguard_variant: str) -> PerfguardFixture:
    """Measure a model under this item's variant: `perfguard.run(model, (x,))`."""
    item = request.node
    state = request.config.stash[state_key]
    variant = str(_perfguard_variant)
    marker = read_marker(
        _test_name(item.getparent(pytest.Function) or item), item.get_closest_marker("perfguard")
    )
    seed = state.options.seed
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy comes with torch
        pass
    import torch

    torch.manual_seed(seed)
    state.used_fixture.add(item.nodeid)
    return PerfguardFixture(test_id(item, variant), variant, marker, state, item.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash.get(state_key, None)
    if state is not None and state.worker is not None and _variant_of(item) is not None:
        same_job.wait_turn(state.worker, item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    state = item.config.stash.get(state_key, None)
    if state is not None and state.worker is not None and _variant_of(item) is not None:
        same_job.report_end(state.worker, outcome.get_result())


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Driving same-job A/B: the workers run the perf test; this session does not."""
    state = pyfuncitem.config.stash.get(state_key, None)
    variant = _variant_of(pyfuncitem)
    if state is None or state.ab is None or variant is None:
        return None
    same_job.run_item(state.ab, state, pyfuncitem.nodeid, test_id(pyfuncitem, variant), variant)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    outcome = yield
    state = item.config.stash.get(state_key, None)
    if state is None or not state.options.enabled or state.ab is not None:
        return  # (driving A/B, the workers call the tests)
    fixture = getattr(item, "funcargs", {}).get("perfguard")
    if isinstance(fixture, PerfguardFixture) and fixture.result is None and outcome.excinfo is None:
        warnings.warn(
            PerfguardWarning(
                f"{item.nodeid} uses the perfguard fixture but never called perfguard.run(model, "
                "inputs): nothing was measured. Call it, or drop the fixture"
            ),
            stacklevel=1,
        )
    bench = getattr(item, "funcargs", {}).get("benchmark")
    if bench is not None and outcome.excinfo is None:
        result = result_from_benchmark(item.nodeid, bench)
        if result is not None:
            state.record(result, item.nodeid)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the runner health monitor (and A/B) once we know there is something to measure."""
    state = session.config.stash.get(state_key, None)
    if state is None or not state.options.enabled or not session.items or state.worker:
        return
    if state.counting is not None:
        return
    perf_items = [i.nodeid for i in session.items if _variant_of(i) is not None]
    from perfguard.health import EXCLUSIVE_ADVICE, EXCLUSIVE_PROCESS, Monitor, compute_mode

    if state.options.ab is not None and perf_items:
        # first: its workers start (import torch, collect) while this session does
        state.ab = same_job.start(Path(session.config.rootpath), state.options, perf_items)
    device = state.options.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = None
    if device.startswith("cuda"):
        from perfguard.environment import cuda_gpu_id

        gpu = cuda_gpu_id(int(device.partition(":")[2] or 0))
        state.exclusive_gpu = compute_mode(gpu) == EXCLUSIVE_PROCESS
    if state.ab is not None and state.exclusive_gpu:
        state.ab.close(interrupted=True)
        state.ab = None
        raise pytest.UsageError(f"--perfguard-ab: {EXCLUSIVE_ADVICE}")
    state.monitor = Monitor(device.partition(":")[0], gpu=gpu)
    state.monitor.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = config.stash.get(state_key, None)
    if state is None or not state.options.enabled or hasattr(config, "workerinput"):
        return
    if state.worker is not None:
        state.worker.close()
        return
    if state.counting is not None:
        return  # counted under callgrind for a measuring session: it keeps the figures
    from perfguard.pipeline import FinishSettings, SameJobBase, finish_run

    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    counting = bool(state.options.instructions) and not interrupted
    same = None
    if state.ab is not None:
        ab = state.ab

        def count_base() -> None:  # in the base's worktree, before it is removed
            ab.base_results = _count_instructions(
                config, state, ab.worktree.rootdir, ab.base_results, " (base side)"
            )

        # before the monitor stops: the workers' CPU time is then ours
        ab.close(interrupted=interrupted, before_removal=count_base if counting else None)
        same = SameJobBase(
            state.ab.commit,
            state.ab.reason,
            tuple(state.ab.base_results),
            state.ab.base_environment or {},
        )
    if counting:
        state.results = _count_instructions(config, state, Path(config.rootpath), state.results)
    from perfguard.stats.verdicts import Thresholds

    o = state.options
    environment = state.environment or _fallback_environment(o.device)
    from perfguard.environment import machine_key

    settings = FinishSettings(
        root=Path(config.rootpath),
        baseline_dir=o.baseline_dir,
        machine=o.machine or machine_key(environment),
        # A/B with nothing measured (no perf items) has nothing to compare
        compare="none" if o.ab and state.ab is None else o.compare,
        main_branch=o.main_branch,
        baseline_depth=o.baseline_depth,
        save=o.save,
        save_replace=o.save_replace,
        unsaved_reason=_why_not_saved(state, exitstatus),
        allow_dirty=o.allow_dirty,
        report=o.report,
        json=o.json,
        unhealthy=o.unhealthy,
        confirm=o.confirm,
        traces=trace_dir(o),
        thresholds=Thresholds(
            min_change_pct=o.min_change_pct,
            ab_min_change_pct=o.ab_min_change_pct,
            gate_p99=o.gate_p99,
            per_test=state.per_test_thresholds,
        ),
    )
    remeasure = None
    # (in EXCLUSIVE_PROCESS compute mode a second process cannot use the GPU: not attempted,
    # and the runner-health warning says why the verdicts stand unconfirmed)
    confirming = same is None and o.compare != "none" and o.confirm > 0 and not state.exclusive_gpu
    if confirming and exitstatus != pytest.ExitCode.INTERRUPTED:
        from perfguard.pytest_plugin.confirm import remeasurer

        remeasure = remeasurer(config, o, state.nodeids, state.measured_at, state.progress.note)
    outcome = finish_run(
        state.results,
        environment,
        settings,
        extra_settings={
            "budget_s": o.budget_s,
            "repeats": o.repeats,
            "seed": o.seed,
            "unhealthy": o.unhealthy,
            **({"shard": f"{o.shard[0]}/{o.shard[1]}"} if o.shard else {}),
            **({"ab": o.ab} if o.ab else {}),
        },
        health=None if state.monitor is None else state.monitor.stop(),
        same_job=same,
        remeasure=remeasure,
    )
    config.stash[outcome_key] = outcome
    if outcome.error is not None:
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    elif (
        o.fail_on == "regression"
        and outcome.run.has_regression
        and session.exitstatus == pytest.ExitCode.OK
    ):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _count_instructions(
    config: pytest.Config,
    state: SessionState,
    root: Path,
    results: list[VariantResult],
    side: str = "",
) -> list[VariantResult]:
    """`results` with callgrind's instruction counts (`--perfguard-instructions`)."""
    from perfguard.pytest_plugin.confirm import plugin_args
    from perfguard.pytest_plugin.instructions import count_instructions

    extra: list[str] = []
    if config.inipath is not None:  # the same ini file, at its place in `root`'s tree
        ini = Path(config.inipath)
        with contextlib.suppress(ValueError):
            ini = root / ini.relative_to(Path(config.rootpath))
        extra += ["-c", str(ini)]
    extra += plugin_args(config.invocation_params.args)
    # (a base-side result has its head's key, and the same node id in the base's tree)
    return count_instructions(
        root, state.options, extra, results, state.nodeids, state.progress.note, side=side
    )


def _why_not_saved(state: SessionState, exitstatus: int) -> str | None:
    """A session that did not run its whole suite must not become a baseline."""
    if state.collection_errors:
        return f"{state.collection_errors} collection error(s): fix them and save again"
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return "the session was interrupted"
    if exitstatus in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        return "the session ended with an internal or usage error"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    outcome = yield
    state = collector.config.stash.get(state_key, None)
    if state is not None and outcome.get_result().failed:
        state.collection_errors += 1


def _fallback_environment(device: str) -> dict[str, Any]:
    from perfguard.environment import collect_environment
    from perfguard.measure.runner import resolve_device

    try:
        return collect_environment(resolve_device(device))
    except Exception:  # no device at all: describe the CPU
        import torch

        return collect_environment(torch.device("cpu"))


outcome_key = pytest.StashKey[Any]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    outcome = config.stash.get(outcome_key, None)
    if outcome is None:
        return
    from perfguard.report.terminal import summary_lines

    tr = terminalreporter
    tr.section("perfguard")
    writer = getattr(tr, "_tw", None)
    width = min(int(getattr(writer, "fullwidth", 100)), 100)
    for line in summary_lines(outcome.run, width=max(width, 80)):
        tr.write_line(line)
    for message in outcome.messages:
        tr.write_line(message)
    if outcome.report_path:
        tr.write_line(f"report: {outcome.report_path}")
    if outcome.json_path:
        tr.write_line(f"results: {outcome.json_path}")
    if outcome.error:
        tr.write_line(f"perfguard error: {outcome.error}", red=True, bold=True)
    elif outcome.run.has_regression:
        tr.write_line("perfguard: regression found", red=True, bold=True)
