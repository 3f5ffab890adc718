"""The stored JSON format's versions, and how an older file is brought up to date.

The format was frozen for perfguard's first release at version 11 (`RELEASED`): every format
change from then on keeps a migration here, one version to the next, and says what changed
below. Files of the pre-release versions 1 to 10 are refused with what to do (measure that
commit again): their migrations, and the reading of notes back into reasons that version 9
needed, were dropped when the format was frozen, and the project's own results files
(`benchmarks/data`) were rewritten to version 11 once.

History:
- 11 (the first released format): a run has `schema_version`, `commit`, `machine`,
  `created`, `environment`, `baseline` (`commit`, `reason`, `mode`: stored or ab), `results`,
  `comparisons`, `settings` (with `thresholds` and, where a change loosened them,
  `loosened`), `health`, `cost`, `incomplete` (the gaps: collection_error, interrupted,
  timeout, not_measured, base_failed, deleted), `selection` (a partial run's step),
  `accept_error`, and the A/B and confirmation sides (`baseline_results`,
  `confirm_results`, `confirm_base_results`). A result has its `workload` (forward, train,
  generate), `status`, `metrics`, the raw `samples_ms` (null in a stored baseline), `blocks`
  and `sketch` (what a baseline keeps instead), `phases` (a generation's), `counters`
  (exact figures, `compile_instructions`/`forward_instructions` under callgrind,
  `memory_growth_bytes_per_call`, `recompile_reasons`), `drift_check` and `details`
  (`build`, `profile`, `ab`, `memory_sites`/`memory_held_sites`). A comparison has its
  typed `reasons` (the kinds of `perfguard/records/reasons.py`) beside `note` (their words),
  `scope` ("item" for a row about an item as a whole), `confirmation`, `accepted`,
  `change_ci` (a paired change's interval) and `sites` (a memory verdict's allocation sites).

- 12: a run has `reach`, the record of what each perf test ran (a full run's: its files'
  and blocks' table, each test's blocks, whole-file dependencies and package folders, the
  distributions it imported; `perfguard/records/reach.py`), and a selection has `reached`
  (what of the change reached each measured test). `settings` records `unhealthy` and
  `fail_on` as the run was judged, and `guarded` (the settings a later change may not
  loosen, as this run measured by: `run`, and `tests` from the markers), and `loosened`
  may name those and `confirm` too (rules a change loosened, judged by the base's). A drift
  check may hold `nondeterministic` (the spread of two eager calls: the model is not
  judged). New reason kinds: `baseline_error` (the base had the item and could not
  measure it) and `nondeterministic`. A result's
  `workload` may be `distributed` (`perfguard.distributed`: one step across ranks, its
  `details` holding the ranks' figures). An 11 file has none of these: a partial run
  against it measures everything, its settings read as the defaults were.

- 13: the environment is part of the change. A run's `environment` holds `packages` (every
  installed distribution and its version) and `triton`; `baseline.runs_in` says which
  environment same-job A/B's base side ran in (`how`: built from the base's own files,
  given, or failed, with the dependency files the change altered and what building cost).
  A 12 file has none of these: its environments compare by the keys it has.

- 14: a record's keys are 13's; what is new is beside it. The summary of a baselines branch
  may keep the rows of older commits (those whose records retention removed) in one file per
  machine and month, `.summary/<machine>/<YYYY-MM>.parquet` (`perfguard/store/months.py`),
  besides a part per commit. A perfguard that reads 13 would pass those files over and show
  a history with its older months missing; the version makes it refuse the branch's records
  instead (upgrade perfguard). A 13 file reads unchanged.

- 15: verdicts per operator and kernel. A result's `details.op_times` holds its profiled
  blocks, taken apart from the timed ones (`clock`: host self time of the operators on a CPU,
  device time of the kernels on CUDA; `calls` per block; `call_us`, a call's time in each
  block; `blocks`, each a map from a place in the call, `aten::addmm #7`, to its microseconds
  per call; `where`, the module a place ran in where known; `perfguard/records/op_times.py`).
  A run has `op_comparisons`: each place compared (`place`, `where`, `clock`, `baseline_us`,
  `current_us`, `change_pct`, `share_pct`, `p_value`, `adjusted_p`, `bar_pct`, `paired`,
  `verdict`: regression, improvement, unchanged, inconclusive or minor, `gating`). The
  settings record `gate_kernels`, `op_blocks` and `op_min_change`. A 14 file reads unchanged.

Before the release (kept for the record; not read): 1 the results format; 2 counters; 3
instruction counts; 4 confirmation records; 5 blocks and sketches instead of raw samples in
baselines, gzip; 6 workloads, throughput, the device clock; 7 generations; 8 accepted
changes and a run's cost; 9 typed reasons and item rows; 10 incomplete runs, recompile
reasons, AOTInductor figures, loosened rules; 11 paired changes, selection, memory sites.

A newer version than this perfguard knows is refused (upgrade perfguard); an older one is
migrated in memory by the steps below, one version at a time, and the file on disk is left as
it is until it is saved again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfguard.errors import PerfguardError
from perfguard.records import SCHEMA_VERSION

RELEASED = 11
"""The first released format: older versions were pre-release, and are refused."""


def _11_to_12(doc: dict[str, Any]) -> dict[str, Any]:
    """12 only adds keys and values (`reach`, `selection.reached`, recorded settings, a
    drift check's `nondeterministic`, two reason kinds, the `distributed` workload): an 11
    file has none of them and reads unchanged."""
    return {**doc, "schema_version": 12}


def _12_to_13(doc: dict[str, Any]) -> dict[str, Any]:
    """13 only adds keys (see the history): a 12 file reads unchanged."""
    return {**doc, "schema_version": 13}


def _13_to_14(doc: dict[str, Any]) -> dict[str, Any]:
    """14 changes the summary's layout beside the records, not a record: a 13 file reads
    unchanged."""
    return {**doc, "schema_version": 14}


def _14_to_15(doc: dict[str, Any]) -> dict[str, Any]:
    """15 only adds keys (a result's `details.op_times`, a run's `op_comparisons`, the
    settings `gate_kernels`, `op_blocks` and `op_min_change`): a 14 file reads unchanged, its
    results without operators' times (no operator verdicts against it)."""
    return {**doc, "schema_version": 15}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    11: _11_to_12,
    12: _12_to_13,
    13: _13_to_14,
    14: _14_to_15,
}
"""version N -> a function turning a version-N document into a version-(N+1) one."""


class SchemaError(PerfguardError, ValueError):
    pass


def upgrade(doc: Any) -> dict[str, Any]:
    """Return `doc` in the current schema version, or raise `SchemaError` saying what to do."""
    if not isinstance(doc, dict):
        raise SchemaError("it is not a JSON object")
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SchemaError(f"it has no integer schema_version (found {version!r})")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"it has schema_version {version}, newer than this perfguard reads "
            f"({SCHEMA_VERSION}): upgrade perfguard (pip install -U perfguard)"
        )
    if 1 <= version < RELEASED:
        raise SchemaError(
            f"it has schema_version {version}, written by a pre-release perfguard (this one "
            f"reads {RELEASED} and later): measure that commit again"
        )
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise SchemaError(
                f"schema_version {version} is unknown to this perfguard (it reads "
                f"{SCHEMA_VERSION}); re-create the file by measuring that commit again"
            )
        doc = step(doc)
        version = doc["schema_version"]
    upgraded: dict[str, Any] = doc
    return upgraded
