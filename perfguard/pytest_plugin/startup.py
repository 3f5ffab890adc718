"""What `pytest_configure` does in a session with `--perfguard`: the checks before anything
is measured, the session's state, and the plugin object of its role (`roles`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from perfguard.pytest_plugin.ab.roles import AbDriving
from perfguard.pytest_plugin.ab.worker import AbWorker
from perfguard.pytest_plugin.keys import recording_key, role_key, state_key, undo_key
from perfguard.pytest_plugin.options import Options, paired_save
from perfguard.pytest_plugin.progress import ProgressWriter
from perfguard.pytest_plugin.roles import Counting, Measuring, Role
from perfguard.pytest_plugin.signals import HELD, HeldImport, interrupt_on_sigterm
from perfguard.pytest_plugin.state import SessionState

if TYPE_CHECKING:
    from perfguard.measure.callgrind import Regions
    from perfguard.pytest_plugin.ab.worker import WorkerLink
    from perfguard.pytest_plugin.recording import Recording
    from perfguard.watchdog import Watchdog

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


def role_for(
    state: SessionState,
    link: WorkerLink | None,
    counting: tuple[tuple[str, ...], Regions] | None,
    recording: Recording | None,
    watchdog: Watchdog | None,
) -> Role:
    """The plugin object of a measuring session's role."""
    if link is not None:
        return AbWorker(state, link, recording)
    if counting is not None:
        return Counting(state, counting)
    if state.options.orders.calibrate is not None:
        from perfguard.pytest_plugin.ab.calibrating import Calibrating

        return Calibrating(state, recording, watchdog)
    if state.options.ab is not None or state.options.ab_env:
        if state.options.orders.canary_pct:
            from perfguard.pytest_plugin.ab.calibrating import CanaryDriving

            return CanaryDriving(state, recording, watchdog)
        return AbDriving(state, recording, watchdog)
    return Measuring(state, recording, watchdog)


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
    )
    from perfguard.measure.callgrind import CallgrindError, build_shim, counted_regions

    counting = counted_regions(options.orders.instructions, options.orders.shim)
    if options.instructions and counting is None:
        try:  # asked for and impossible here: say so before anything is measured
            build_shim()
        except CallgrindError as exc:
            raise pytest.UsageError(f"--perfguard-instructions: {exc}") from None
    link = None
    if options.worker:
        from perfguard.pytest_plugin.ab.worker import WorkerLink

        link = WorkerLink.from_orders(options.orders)
    from perfguard.pytest_plugin.timeout import SIGNAL

    undo = [HeldImport("torch", (*HELD, SIGNAL)).install()]
    watchdog = None
    if not options.worker and counting is None:  # a session the user started
        from perfguard.watchdog import Watchdog

        watchdog = Watchdog.start(
            state.root, options.json, options.report, options.machine, options.recorded()
        )
        if watchdog is not None:
            undo.append(watchdog.close)
        undo.append(interrupt_on_sigterm())
    config.stash.setdefault(undo_key, []).extend(undo)
    recording = config.stash.get(recording_key, None)
    if recording is not None:
        if (options.ab is not None or options.ab_env) and not options.worker:
            recording.recorder.stop()  # a driver runs no test: its head worker records
        else:
            config.pluginmanager.register(recording, "perfguard-recording")
    role = role_for(state, link, counting, recording, watchdog)
    config.stash[state_key] = state
    config.stash[role_key] = role
    config.pluginmanager.register(role, "perfguard-session")
