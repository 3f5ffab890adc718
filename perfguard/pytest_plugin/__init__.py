"""pytest glue: options, the `perfguard` fixture and marker, one item per variant.

Registered through the `pytest11` entry point `perfguard`, so it is loaded into every pytest
session of an environment where perfguard is installed, asked for or not. Without
`--perfguard` it registers its options, ini keys and marker, makes each perf test's items (one
per variant) and skips them: that is all it imports (no numpy, no torch, no records). With
`--perfguard`, `pytest_configure` registers the plugin object of the session's role
(`startup`, `roles`): measuring, driving same-job A/B, being an A/B worker, or counting
instructions.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.pytest_plugin.collection import VARIANT_PARAM, test_name, variant_of
from perfguard.pytest_plugin.keys import (
    item_settings_key,
    options_key,
    recording_key,
    role_key,
    state_key,
    tests_key,
    undo_key,
)
from perfguard.pytest_plugin.registration import MARKER_HELP, add_options

if TYPE_CHECKING:
    from perfguard.pytest_plugin.fixture import PerfguardFixture


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from perfguard.pytest_plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """A session that records starts before the initial conftests load: what they run is
    part of every test's record."""
    if not getattr(early_config.known_args_namespace, "perfguard", False):
        return
    from perfguard.pytest_plugin.recording import Recording, wants_record
    from perfguard.selection.recorder import Recorder

    if wants_record(early_config):
        recorder = Recorder(Path(early_config.rootpath))
        recorder.start()
        early_config.stash[recording_key] = Recording(recorder)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.stash[tests_key] = {}
    from perfguard.pytest_plugin.options import read_options
    from perfguard.variants.spec import VARIANTS, Registering

    # a team's variants, from every conftest and plugin (a later conftest's too: the hook is
    # historic), gone again when the session ends
    config.stash[undo_key] = [VARIANTS.saved()]
    hook = config.hook.pytest_perfguard_variants
    hook.call_historic(
        kwargs={"registry": Registering(VARIANTS, "a pytest_perfguard_variants hook")}
    )

    # read and checked in every session: a wrong value is a usage error, asked for or not
    options = config.stash[options_key] = read_options(config)
    if not options.enabled:
        from perfguard.pytest_plugin.skipping import Skipping

        config.pluginmanager.register(Skipping(), "perfguard-session")
        return
    from perfguard.pytest_plugin.startup import configure

    configure(config, options)


def pytest_unconfigure(config: pytest.Config) -> None:
    for undo in config.stash.get(undo_key, []):
        undo()
    recording = config.stash.get(recording_key, None)
    if recording is not None:
        recording.recorder.stop()  # a session ended early: the tracer goes with it


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One item per variant; the marker read here, once, into the test's `ItemSettings`. A
    test whose `perfguard` is a fixture of the user's own (it does not ask for the variant, as
    perfguard's does) is left alone: the user's fixture wins."""
    if "perfguard" not in metafunc.fixturenames or VARIANT_PARAM not in metafunc.fixturenames:
        return
    from perfguard.pytest_plugin.collection import variants_for
    from perfguard.pytest_plugin.marker import read_marker
    from perfguard.settings import ItemSettings

    options = metafunc.config.stash[options_key]
    test = test_name(metafunc)
    marker = read_marker(test, metafunc.definition.get_closest_marker("perfguard"))
    variants = variants_for(options, marker)
    metafunc.config.stash[tests_key][test] = ItemSettings(
        test=test,
        variants=variants,
        marker=marker,
        timeout_s=float(marker.options.get("timeout_s", options.timeout_s)),
        depends=tuple(str(g) for g in marker.options.get("depends") or ()),
    )
    metafunc.parametrize(VARIANT_PARAM, variants, ids=list(variants))


def pytest_itemcollected(item: pytest.Item) -> None:
    """A perf item keeps its test's settings (`settings_of`)."""
    if variant_of(item) is not None:
        found = item.config.stash[tests_key].get(item.nodeid.partition("[")[0])
        if found is not None:
            item.stash[item_settings_key] = found


@pytest.fixture(name=VARIANT_PARAM)
def _perfguard_variant() -> str:
    """Replaced by the variant of each item (pytest_generate_tests parametrizes it)."""
    raise RuntimeError("perf tests are parametrized by variant; this default never runs")


@pytest.fixture
def perfguard(request: pytest.FixtureRequest, _perfguard_variant: str) -> PerfguardFixture:
    """Measure a model under this item's variant: `perfguard.run(model, (x,))`, or a training
    step: `perfguard.train_step(model, (x,), loss_fn=..., optimizer=...)`."""
    from perfguard.pytest_plugin.fixture import for_item

    return for_item(request.node, request.config.stash[role_key], str(_perfguard_variant))


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    if outcome.excinfo is not None:  # an interrupt: pytest says so itself
        return
    state = collector.config.stash.get(state_key, None)
    report = outcome.get_result()
    if state is not None and report.failed:
        from perfguard.pytest_plugin.gaps import first_line

        where = collector.nodeid or str(getattr(collector, "path", "") or "")
        state.tally.collection.append((where, first_line(report)))
