"""pytest glue: options, the `perfguard` fixture and marker, one item per variant.

Registered through the `pytest11` entry point `perfguard`. `pytest_configure` reads the
options and registers the plugin object of the session's role (`roles`): skipping perf
items, measuring them, driving same-job A/B, being an A/B worker, or counting instructions.
Importing this module is cheap: torch and the measuring library load only when a perf item
runs with `--perfguard`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from perfguard.pytest_plugin.collection import VARIANT_PARAM, test_id, test_name, variants_for
from perfguard.pytest_plugin.fixture import PerfguardFixture
from perfguard.pytest_plugin.marker import HELP as MARKER_HELP
from perfguard.pytest_plugin.marker import read_marker
from perfguard.pytest_plugin.options import add_options, paired_save, read_options
from perfguard.pytest_plugin.progress import ProgressWriter
from perfguard.pytest_plugin.roles import role_for
from perfguard.pytest_plugin.signals import HeldImport, interrupt_on_sigterm
from perfguard.pytest_plugin.state import SessionState

state_key = pytest.StashKey[SessionState]()
undo_key = pytest.StashKey[list[Callable[[], None]]]()
"""What `pytest_configure` changed in the process (signal handlers, import hooks)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _under_xdist(config: pytest.Config) -> bool:
    """A pytest-xdist worker, or a session that starts them (`-n N`, or `--dist` with
    `--tx`, xdist's own rule once it has read its options)."""
    if hasattr(config, "workerinput"):
        return True
    try:
        return config.getoption("dist") != "no" and bool(config.getoption("tx"))
    except ValueError:  # xdist is not installed
        return False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    options = read_options(config)
    if options.enabled and _under_xdist(config):
        raise pytest.UsageError(
            "--perfguard cannot run under pytest-xdist (-n, --dist): measurements on one "
            "device must not overlap. Run the perf tests in one process (drop -n and --dist, "
            "or add -p no:xdist), and shard across machines instead (--perfguard-shard=K/N; "
            "docs/ci.md, 'Use it in CI')"
        )
    if options.enabled and options.save and not options.worker:
        from perfguard.git import GitRefused, git_state
        from perfguard.pipeline import check_can_save

        try:
            refusal = check_can_save(git_state(Path(config.rootpath)), options.allow_dirty)
        except GitRefused as exc:
            refusal = f"--perfguard-save: {exc}"
        if refusal:
            raise pytest.UsageError(refusal)
    options, unpaired = paired_save(Path(config.rootpath), options)
    state = SessionState(
        options,
        ProgressWriter(config, options.progress),
        root=Path(config.rootpath),
        notes=[unpaired] if unpaired else [],
    )
    from perfguard.measure.callgrind import CallgrindError, build_shim, regions_from_env

    state.counting = regions_from_env()
    if options.enabled and options.instructions and state.counting is None:
        try:  # asked for and impossible here: say so before anything is measured
            build_shim()
        except CallgrindError as exc:
            raise pytest.UsageError(f"--perfguard-instructions: {exc}") from None
    if options.worker:
        from perfguard.pytest_plugin.ab.worker import WorkerLink

        state.worker = WorkerLink.from_env()
    if options.enabled:
        undo = [HeldImport("torch").install()]
        if options.save and options.compile_cache is not None and not options.worker:
            undo.append(_compile_cache_writer())
        if not options.worker and state.counting is None:
            undo.append(interrupt_on_sigterm())
        config.stash[undo_key] = undo
    config.stash[state_key] = state
    config.pluginmanager.register(role_for(state), "perfguard-session")


def _compile_cache_writer() -> Callable[[], None]:
    """Main's run writes the compile cache, its paired run's workers included (they never
    save themselves): told through the environment they inherit; undone at the end."""
    import os

    from perfguard.measure.compile_cache import ENV_WRITE

    os.environ[ENV_WRITE] = "1"

    def undo() -> None:
        os.environ.pop(ENV_WRITE, None)

    return undo


def pytest_unconfigure(config: pytest.Config) -> None:
    for undo in config.stash.get(undo_key, []):
        undo()


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perfguard" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash[state_key]
    test = test_name(metafunc)
    marker = read_marker(test, metafunc.definition.get_closest_marker("perfguard"))
    variants = variants_for(state.options, marker)
    if marker.thresholds:
        state.per_test_thresholds[test] = marker.thresholds
    metafunc.parametrize(VARIANT_PARAM, variants, ids=list(variants))


@pytest.fixture(name=VARIANT_PARAM)
def _perfguard_variant() -> str:
    """Replaced by the variant of each item (pytest_generate_tests parametrizes it)."""
    raise RuntimeError("perf tests are parametrized by variant; this default never runs")


@pytest.fixture
def perfguard(request: pytest.FixtureRequest, _perfguard_variant: str) -> PerfguardFixture:
    """Measure a model under this item's variant: `perfguard.run(model, (x,))`, or a training
    step: `perfguard.train_step(model, (x,), loss_fn=..., optimizer=...)`."""
    item = request.node
    state = request.config.stash[state_key]
    variant = str(_perfguard_variant)
    marker = read_marker(
        test_name(item.getparent(pytest.Function) or item), item.get_closest_marker("perfguard")
    )
    if state.ab is None:  # an A/B driver leaves the measuring to its workers
        _seed(state.options.seed)
    state.used_fixture.add(item.nodeid)
    return PerfguardFixture(test_id(item, variant), variant, marker, state, item.nodeid)


def _seed(seed: int) -> None:
    """The same random weights in every variant and every run."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy comes with torch
        pass
    import torch

    torch.manual_seed(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    if outcome.excinfo is not None:  # an interrupt: pytest says so itself
        return
    state = collector.config.stash.get(state_key, None)
    report = outcome.get_result()
    if state is not None and report.failed:
        from perfguard.pytest_plugin.gaps import first_line

        state.collection_errors += 1
        where = collector.nodeid or str(getattr(collector, "path", "") or "")
        state.tally.collection.append((where, first_line(report)))
