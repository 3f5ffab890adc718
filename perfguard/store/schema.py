"""The stored JSON format's versions, and how an older file is brought up to date.

History:
- 1 (perfguard 0.1): the results format: schema_version, commit, machine, environment,
  baseline, results (with raw samples_ms), comparisons; extra keys repeats_ms, block_sizes,
  drift_check, details, settings, created. Keys added later under the same version, all
  optional when read: health, baseline_results, confirm_results, confirm_base_results; in
  metrics the latency, memory, compile and size details; in comparisons
  min_detectable_pct, gating, note, trend, baseline_ci, current_ci, confirm_change_pct.
- 2: each result has `counters` (exact figures: graphs, graph breaks with their reasons,
  recompiles, the ATen operators of one call by name, FLOPs, parameter and buffer bytes,
  CUDA kernel and graph launches), null where nothing was counted. Comparisons may have the
  exact metrics `graphs`, `graph_breaks`, `recompiles`, `aten_ops` and `flops`, with no
  p-value. Migration from 1: every result gets `"counters": null`.
- 3: counters may hold `compile_instructions` (a compiled variant's cold compile) and
  `forward_instructions` (one warm call), counted under valgrind's callgrind when a session
  asks (`--perfguard-instructions`); comparisons may have the metrics of the same names.
  Migration from 2: every counters object gets both, null (nothing was counted).
- 4: a comparison may have `confirmation`, what measuring its item again showed (stored
  baselines): `kind` (shown, not_shown, unconfirmed, settled, unsettled, not_settled),
  `where` (beside the base commit, in a fresh process), `changes` (one per round, as
  `confirm_change_pct`), `paired` (the verdicts of the rounds beside the base commit that
  did not show it, or that it was left with), `bar_pct` and `reason`. In same-job A/B,
  `details.ab.sequential` says for each look which statistic decided (`statistic`: mean or
  trimmed). Migration from 3: nothing to convert (a version-3 comparison has no
  confirmation; its note still says what the re-measure showed).
- 5: a result has `blocks` (per repeat: `sizes`, the calls it timed, and `p50`, `p95`, `p99`
  in ms, the figures the latency tests use) and `sketch` (a quantile sketch of all samples:
  `accuracy`, `offset`, `counts`, `zeros`; perfguard.records.sketch). A stored baseline
  keeps these instead of its raw samples: `samples_ms` is null there, `repeats_ms` and
  `block_sizes` empty. Baselines are written gzip-compressed (`<sha>.json.gz`); every reader
  takes a plain or a compressed file. Migration from 4: a result with samples gets its
  blocks and sketch derived from them when it is read (records.VariantResult); nothing else
  changes.
- 6: workloads and throughput, and the second clock. A result has `workload`: `forward`
  (`perfguard.run`) or `train` (`perfguard.train_step`: each sample one training step);
  metrics have `throughput_per_s` (the batch over p50); counters have `backward_graphs` (a
  compiled training step's, an exact signal that gates like `graphs`) and
  `memory_growth_bytes_per_call` (what a warm call leaves allocated; comparisons may have
  that metric, a leak gating as a regression). On CUDA, metrics may
  have `device_time_ms` (the device time of one call's kernels, from the profiled calls;
  shown, never gated), and `details.profile` has `device_us` (the same, in µs) and
  `kernels_us` (device time per call by kernel name); `profile.self_us` is the operators'
  host self time alone (on CUDA it had the kernels' device time added in). Migration from
  5: a result without `workload` is a forward call; the new figures read as null (no
  version-5 file was measured on CUDA by a released perfguard; a CPU one means the same).
- 7: generations. `workload` may be `generate` (`perfguard.generate`: each sample one whole
  greedy `model.generate`); metrics may have `ttft_p50_ms`/`_p95_`/`_p99_` (time to the
  first new token), `tpot_p50_ms`/`_p95_`/`_p99_` (per new token after it), `tokens_per_s`
  and `token_agreement` (the share of new tokens identical to eager's); a result may have
  `phases`, the per-repeat p50, p95 and p99 of `ttft` and `tpot` (what their comparisons
  test, kept in compact results), and comparisons may have those six metrics. Migration
  from 6: nothing changes (no result of version 6 is a generation).
- 8: accepted changes. A comparison's `verdict` may be `accepted` (a regression within what
  the pull request's `perfguard-accept.toml` accepts), with `accepted`: `bound` (as written,
  `+150%` or `+200 MiB`), `reason` and `by` (who added the entry); a run may have
  `accept_error`, why its accept file could not be read (nothing was accepted); and a run
  has `cost`, what it cost on its runner: `seconds` (all), `measure_s`, `confirm_s` (comparing
  and measuring flagged items again), `items`, `shards` (a merged run's summed). Migration
  from 7: nothing changes (no version-7 file accepted anything; its cost reads as unknown).
- 9: typed reasons and item rows. A comparison has `reasons`, why it reads as it does, each
  an object with a `kind` and its figures (`{"kind": "adjusted", "p": 0.003}`; the kinds and
  their figures are in `perfguard/records/reasons.py`); `note` is still written, the
  reasons in words. A row that says what became of an item as a whole (verdict new, missing
  or error, metric `latency_p50_ms`) has `scope: "item"`; other rows have no `scope` (a
  metric). Migration from 8: such rows get their scope (the only rows of that metric with
  those verdicts and no p-value), and every note is read back once into reasons: each part
  that renders to the same words again becomes its kind, an item's error its `failed`
  reason, the operator list of an `aten_ops` row and the break list of a `graph_breaks`
  row (each may hold "; ") their `op_changes` and `new_graph_breaks`, the confirmation's
  words its `confirmation`, and any other part a `text` reason with the words as they were.
- 10: incomplete runs. A run has `incomplete`, what it was asked to measure and did not
  (each gap a `kind`: collection_error, interrupted, timeout, not_measured, base_failed or
  deleted;
  a `detail` line; the `items` it hit), empty for a run that measured everything; `merge`
  and `report --exit-code` fail on a run with any. Migration from 9: a run reads as
  complete (version 9 recorded no gaps: a version-9 run that missed items cannot be told).
  Counters have `recompile_reasons` (dynamo's guard failures behind `recompiles`, and how
  often: compile-dynamic at its declared shapes); a result's `details.build` may hold
  `shapes_p50_ms` (compile-dynamic) or an AOTInductor package's `export_time_s`,
  `package_build_time_s`, `load_time_s` and `package_bytes`. `settings` may hold
  `loosened`: the verdict rules the run's change loosened against its base commit's, each
  `test` ("*": the whole run), `rule`, `head` and `base` values (the run was judged by the
  base's).
- 11: main's record from pairs. A paired latency comparison (same-job A/B) has `change_ci`,
  the interval of its change in percent (the trimmed mean of the pairs' log ratios, at the
  level the item stopped at); a baseline saved by main's paired run keeps its comparisons
  against HEAD's first parent (`baseline.mode` "ab"), which `perfguard history` reads as
  that commit's step. Migration from 10: nothing changes (no version-10 comparison has an
  interval of its change). A run may have `selection`, a pull request's selection step:
  `partial` (only the perf items the change can affect were measured) or not, its `reason`,
  the `base` commit the change was read against, the `changed` paths (at most 200) and
  their `changed_count`, and the `unaffected` items left unmeasured (`test`, `variant`, and
  the base's stored figures in `baseline`, where it has them). A memory verdict that stands
  may have `sites`: the allocation sites whose live bytes at each side's peak changed most
  (`where`, `op`, `base_bytes`, `head_bytes`, `change_bytes`, `base_blocks`, `head_blocks`,
  `frames`, `kind`: grew, shrank, new or gone; `code` on CUDA); the results it came from
  keep theirs in `details.memory_sites` and `details.memory_held_sites`.

A newer version than this perfguard knows is refused (upgrade perfguard). An older one is
migrated in memory by the steps below, one version at a time; the file on disk is left as it
is until it is saved again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfguard.errors import PerfguardError
from perfguard.records import SCHEMA_VERSION
from perfguard.records.comparisons import note_reasons, old_item_row


def _1_to_2(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 1 counted nothing: every result's counters are null."""
    results = doc.get("results")
    if isinstance(results, list):
        results = [
            {**r, "counters": r.get("counters")} if isinstance(r, dict) else r for r in results
        ]
    return {**doc, "schema_version": 2, "results": results}


def _2_to_3(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 2 counted no instructions: both counts are null wherever counters are."""
    results = doc.get("results")
    if isinstance(results, list):
        results = [
            {
                **r,
                "counters": {
                    "compile_instructions": None,
                    "forward_instructions": None,
                    **r["counters"],
                },
            }
            if isinstance(r, dict) and isinstance(r.get("counters"), dict)
            else r
            for r in results
        ]
    return {**doc, "schema_version": 3, "results": results}


def _3_to_4(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 3 kept what a re-measure showed in the note only: no confirmation record."""
    return {**doc, "schema_version": 4}


def _4_to_5(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 4 kept every raw sample and no summaries: a result read with samples derives
    its per-repeat blocks and its sketch from them (VariantResult does that on construction),
    so the document itself needs no change."""
    return {**doc, "schema_version": 5}


def _5_to_6(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 5 measured forward calls only, without throughput or a device clock: results
    read `workload` as `forward` and the new figures as null (records.VariantResult)."""
    return {**doc, "schema_version": 6}


def _6_to_7(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 6 had no generations: results read `phases` as empty."""
    return {**doc, "schema_version": 7}


def _7_to_8(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 7 accepted nothing: comparisons read `accepted` as absent."""
    return {**doc, "schema_version": 8}


def _8_to_9(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 8 told item rows by their shape and kept reasons as prose: both typed."""
    comparisons = doc.get("comparisons")
    if isinstance(comparisons, list):
        comparisons = [_typed(c) if isinstance(c, dict) else c for c in comparisons]
    return {**doc, "schema_version": 9, "comparisons": comparisons}


def _typed(c: dict[str, Any]) -> dict[str, Any]:
    return {
        **c,
        "reasons": [r.to_json() for r in note_reasons(c)],
        **({"scope": "item"} if old_item_row(c) else {}),
    }


def _9_to_10(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 9 recorded no gaps: the run reads as complete."""
    return {**doc, "schema_version": 10, "incomplete": doc.get("incomplete") or []}


def _10_to_11(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 10 kept no interval of a paired change: nothing to convert."""
    return {**doc, "schema_version": 11}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _1_to_2,
    2: _2_to_3,
    3: _3_to_4,
    4: _4_to_5,
    5: _5_to_6,
    6: _6_to_7,
    7: _7_to_8,
    8: _8_to_9,
    9: _9_to_10,
    10: _10_to_11,
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
