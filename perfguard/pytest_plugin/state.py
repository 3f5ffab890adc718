"""What the plugin keeps for a session (in `config.stash`), whatever its role."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    from perfguard.stats.thresholds import Thresholds


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
    ab_reach: Reach | None = None  # ... or in this tree's A/B worker, read at its end
    baseline: Baseline | None = None  # resolved once, where the session starts comparing

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

    def record(self, result: VariantResult, nodeid: str) -> None:
        self.results = [r for r in self.results if r.key != result.key]
        self.results.append(result)
        self.nodeids[result.key] = nodeid
        self.measured_at[nodeid] = time.monotonic()
