"""What `pytest_configure` does in a session with `--perfguard`: the checks before anything
is measured, the session's state, and the plugin object of its role (`roles`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfguard.pytest_plugin.ab.roles import AbDriving, AbWorker
from perfguard.pytest_plugin.keys import recording_key, state_key, tests_key, undo_key
from perfguard.pytest_plugin.options import Options, paired_save
from perfguard.pytest_plugin.progress import ProgressWriter
from perfguard.pytest_plugin.roles import Counting, Measuring
from perfguard.pytest_plugin.signals import HeldImport, interrupt_on_sigterm
from perfguard.pytest_plugin.state import SessionState

XDIST_REFUSAL = (
    "--perfguard cannot run under pytest-xdist (-n, --dist): measurements on one device must "
    "not overlap. Run the perf tests in one process: drop -n and --dist, or add `-n 0` where "
    "they come from addopts (or `-p no:xdist` where nothing sets them), and shard across "
    "machines instead (--perfguard-shard=K/N; docs/ci.md, 'Use it in CI')"
)


def _under_xdist(config: pytest.Config) -> bool:
    """A pytest-xdist worker, or a session that starts them (`-n N`, or `--dist` with
    `--tx`, xdist's own rule once it has read its options)."""
    if hasattr(config, "workerinput"):
        return True
    try:
        return config.getoption("dist") != "no" and bool(config.getoption("tx"))
    except ValueError:  # xdist is not installed
        return False


def role_for(state: SessionState) -> object:
    """The plugin object of a measuring session's role."""
    if state.worker is not None:
        return AbWorker(state)
    if state.counting is not None:
        return Counting(state)
    if state.options.orders.calibrate is not None:
        from perfguard.pytest_plugin.ab.calibrating import Calibrating

        return Calibrating(state)
    if state.options.ab is not None:
        return AbDriving(state)
    return Measuring(state)


def configure(config: pytest.Config, options: Options) -> None:
    """Check, make the session's state, register its role (and its recording)."""
    if _under_xdist(config):
        raise pytest.UsageError(XDIST_REFUSAL)
    if options.save and not options.worker:
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
        item_settings=config.stash[tests_key],
    )
    from perfguard.measure.callgrind import CallgrindError, build_shim, counted_regions

    state.counting = counted_regions(options.orders.instructions, options.orders.shim)
    if options.instructions and state.counting is None:
        try:  # asked for and impossible here: say so before anything is measured
            build_shim()
        except CallgrindError as exc:
            raise pytest.UsageError(f"--perfguard-instructions: {exc}") from None
    if options.worker:
        from perfguard.pytest_plugin.ab.worker import WorkerLink

        state.worker = WorkerLink.from_orders(options.orders)
    undo = [HeldImport("torch").install()]
    if not options.worker and state.counting is None:  # a session the user started
        from perfguard.watchdog import Watchdog

        state.watchdog = Watchdog.start(
            state.root, options.json, options.report, options.machine, options.recorded()
        )
        if state.watchdog is not None:
            undo.append(state.watchdog.close)
    if not options.worker and state.counting is None:
        undo.append(interrupt_on_sigterm())
    config.stash[undo_key] = undo
    recording = config.stash.get(recording_key, None)
    if recording is not None:
        state.records = True
        if options.ab is not None and not options.worker:
            recording.recorder.stop()  # a driver runs no test: its head worker records
        else:
            state.recording = recording
            config.pluginmanager.register(recording, "perfguard-recording")
    config.stash[state_key] = state
    config.pluginmanager.register(role_for(state), "perfguard-session")
