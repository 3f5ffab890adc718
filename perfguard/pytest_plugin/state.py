"""What the plugin keeps for a session (in `config.stash`), whatever its role."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.pytest_plugin.collection import test_of
from perfguard.pytest_plugin.gaps import Tally
from perfguard.pytest_plugin.marker import ItemSettings
from perfguard.pytest_plugin.options import Options
from perfguard.pytest_plugin.progress import ProgressWriter
from perfguard.records import Selection, VariantResult
from perfguard.settings import SETTINGS

if TYPE_CHECKING:
    from perfguard.health import Monitor
    from perfguard.measure.callgrind import Regions
    from perfguard.measure.drift import Reference
    from perfguard.pipeline import Baseline
    from perfguard.pytest_plugin.ab.session import AbSession
    from perfguard.pytest_plugin.ab.worker import WorkerLink
    from perfguard.pytest_plugin.recording import Recording
    from perfguard.records.reach import Reach
    from perfguard.stats.bars import Loosened
    from perfguard.stats.thresholds import Thresholds
    from perfguard.watchdog import Watchdog


@dataclass
class SessionState:
    """Everything the plugin keeps for a session, stored in `config.stash`."""

    options: Options
    progress: ProgressWriter
    results: list[VariantResult] = field(default_factory=list)
    references: OrderedDict[str, Reference] = field(default_factory=OrderedDict)
    item_settings: dict[str, ItemSettings] = field(default_factory=dict)  # test -> its settings
    environment: dict[str, Any] | None = None
    used_fixture: set[str] = field(default_factory=set)
    monitor: Monitor | None = None
    ab: AbSession | None = None  # driving same-job A/B
    worker: WorkerLink | None = None  # this session is an A/B worker
    nodeids: dict[tuple[str, str], str] = field(default_factory=dict)  # result key -> item
    measured_at: dict[str, float] = field(default_factory=dict)  # item -> time.monotonic()
    started: float = field(default_factory=time.monotonic)  # the run's cost counts from here
    collection_errors: int = 0  # a session with any must not be saved as a baseline
    tally: Tally = field(default_factory=Tally)  # what it was asked to measure, and how it fared
    exclusive_gpu: bool = False  # EXCLUSIVE_PROCESS compute mode: no second process on the GPU
    # this process runs under callgrind to count these regions (--perfguard-instructions)
    counting: tuple[tuple[str, ...], Regions] | None = None
    notes: list[str] = field(default_factory=list)  # lines for the terminal summary
    selection: Selection | None = None  # a pull request's selection step (partial runs)
    root: Path = field(default_factory=Path.cwd)  # the session's rootdir
    records: bool = False  # this run records what each perf test runs (a full run)
    recording: Recording | None = None  # ... in this process (not an A/B driver's)
    watchdog: Watchdog | None = None  # the supervisor of a session the user started
    ab_reach: Reach | None = None  # ... or in this tree's A/B worker, read at its end
    baseline: Baseline | None = None  # resolved once, where the session starts comparing
    # test -> the item settings (budget, repeats, drift tolerance) this tree loosened, put back
    # to the base's (`perfguard.stats.bars.floors`), and what was put back (for the results)
    floors: dict[str, dict[str, Any]] = field(default_factory=dict)
    loosened: list[Loosened] = field(default_factory=list)

    def thresholds(self) -> Thresholds:
        """The verdict rules this session's options and markers set."""
        from perfguard.stats.thresholds import Thresholds

        # each rule with an option, by its marker key (the Thresholds field of that name)
        given = {
            s.marker: getattr(self.options, s.field)
            for s in SETTINGS
            if s.threshold and s.flag and s.marker
        }
        per_test = {t: s.marker.thresholds for t, s in self.item_settings.items()}
        return Thresholds(**given, per_test={t: v for t, v in per_test.items() if v})

    def guarded(self) -> dict[str, Any]:
        """The guarded settings this session measures by (`perfguard.stats.bars`): the run's
        and each test's marker's; recorded with the results, what the next change to them is
        judged against."""
        from perfguard.settings import GUARDED_ITEM

        tests = {
            test: {k: s.marker.options[k] for k in GUARDED_ITEM if k in s.marker.options}
            for test, s in self.item_settings.items()
        }
        return {"run": self.options.guarded(), "tests": {t: v for t, v in tests.items() if v}}

    def given_on_the_command_line(self, base: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """`base`'s run-level guarded settings, but for those this session took from its
        command line, which are this session's: the line is the invoker's (the workflow's),
        which a change of the tree does not write, and both trees of an A/B run take it."""
        from perfguard.settings import BY_FIELD

        if base is None:
            return None
        mine = self.options.guarded()
        sources = self.options.sources
        return {
            k: mine.get(k, v) if sources.get(BY_FIELD[k].name, "").startswith("--") else v
            for k, v in base.items()
            if k in BY_FIELD
        }

    def floor_of(self, nodeid: str) -> dict[str, Any]:
        """The settings floor of a perf item: its driver's word (an A/B worker), else this
        session's (`floors`, against a stored baseline)."""
        if self.worker is not None:
            return dict(self.worker.floor)
        return dict(self.floors.get(test_of(nodeid), {}))

    def note_loosened(self, found: Iterable[Loosened]) -> None:
        self.loosened.extend(f for f in found if f not in self.loosened)

    def result_of(self, key: tuple[str, str]) -> VariantResult | None:
        return next((r for r in self.results if r.key == key), None)

    def record(self, result: VariantResult, nodeid: str) -> None:
        self.results = [r for r in self.results if r.key != result.key]
        self.results.append(result)
        self.nodeids[result.key] = nodeid
        self.measured_at[nodeid] = time.monotonic()
        if result.status == "ok":  # an attempt that ran again and measured (a rerun)
            self.tally.timed_out.pop(nodeid, None)
        if self.watchdog is not None:
            self.watchdog.result(result.to_json(), self.environment)
