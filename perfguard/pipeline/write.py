"""Writing: the results file, the report and, on main, the baseline of HEAD."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from perfguard.files import write_json_atomic
from perfguard.git import GitState
from perfguard.pipeline.baseline import check_can_save
from perfguard.pipeline.inputs import FinishSettings
from perfguard.records import Run
from perfguard.report.outputs import write_reports
from perfguard.stats.verdicts import Thresholds
from perfguard.store.baselines import BaselineStore, Saved
from perfguard.store.objects import ObjectStore
from perfguard.store.run_file import BaselineError


def write_outputs(
    run: Run, settings: FinishSettings, messages: list[str], failures: list[str]
) -> tuple[Path | None, Path | None]:
    """The results file and the report (their paths; None where not asked or not written)."""
    json_path = _write(settings.json, lambda p: write_json_atomic(p, run.to_json()), failures)

    def report(path: Path) -> None:
        written = write_reports(run, path, Thresholds.from_json(run.settings.get("thresholds")))
        if written.full is not None:
            messages.append(
                f"the report was trimmed to fit a GitHub comment; full report: {written.full}"
            )

    return json_path, _write(settings.report, report, failures)


def save(
    run: Run,
    settings: FinishSettings,
    state: GitState | None,
    store: BaselineStore | ObjectStore,
    messages: list[str],
    failures: list[str],
    comparing_failed: bool,
) -> Path | str | None:
    """Store the run as HEAD's baseline, unless it must not be (said in `messages`)."""
    refusal = _save_refusal(run, settings, comparing_failed=comparing_failed)
    if refusal:
        messages.append(f"baseline not saved: {refusal}")
        return None
    unsafe = check_can_save(state, settings.allow_dirty, settings.option_prefix)
    if unsafe is not None:
        failures.append(unsafe)
        return None
    try:
        done = store.save(
            replace(run, baseline_results=(), confirm_results=(), confirm_base_results=()),
            replace_all=settings.save_replace,
        )
    except BaselineError as exc:
        failures.append(f"baseline not saved: {exc}")
        return None
    except OSError as exc:
        failures.append(f"baseline not saved: {_unwritable(settings.baseline_dir, exc)}")
        return None
    messages.append(_saved_message(done))
    return done.path


def _write(path: Path | None, write: Callable[[Path], None], failures: list[str]) -> Path | None:
    """Write one output; a full disk or an unwritable folder is a failure line, not a crash."""
    if path is None:
        return None
    try:
        write(path)
    except OSError as exc:
        failures.append(_unwritable(path, exc))
        return None
    return path


def _save_refusal(run: Run, settings: FinishSettings, *, comparing_failed: bool) -> str | None:
    """Why this run is not stored as HEAD's baseline (a note, not an error), or None."""
    if settings.unsaved_reason:
        return f"{settings.unsaved_reason}; the stored baseline is unchanged"
    if not run.results:
        return "nothing was measured (no perf item ran); the stored baseline is unchanged"
    if run.selection is not None and run.selection.partial:
        return "a partial run (a pull request's) is no commit's baseline"
    if comparing_failed:
        return "the comparison stopped (above); fix that and save again"
    return None


def _saved_message(done: Saved) -> str:
    if done.kept:
        return (
            f"updated baseline {done.path}: {done.measured} result(s) measured, "
            f"{done.kept} kept from the earlier save"
        )
    return f"saved baseline {done.path}" + (" (replacing the earlier save)" if done.updated else "")


def _unwritable(path: Path | str | None, exc: OSError) -> str:
    """One line naming what was written (an fsync that fails on a full disk names no file)."""
    where = path or exc.filename
    return f"could not write {where}: {exc.strerror or exc}"
