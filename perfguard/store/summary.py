"""The summary table: one row per commit, machine, test, variant and metric, in Parquet.

Main's history (`perfguard history`, `site`, `alert`) and a PR run's noise floor and trend
chart read series of figures, not records: reading every record of a year of main would parse
gigabytes of JSON. So each save writes, beside its record, that record's rows of the table:

    <baseline-dir>/.summary/<machine>/<full sha>.parquet

with the columns `COLUMNS`: the figure (`value`) and the spread of its per-repeat figures
(`low`, `high`; latency percentiles and a generation's TTFT and TPOT only), `record`, the git
blob id of the record the rows were made from, and `accepted`: what accepted that figure's
regression at that commit (the accept file's bound and reason; empty for nearly every row, and
in parts written before it).
A part whose `record` is not the record's current blob id is stale (the record was saved
again, or compacted) and, like a missing one, is made again from the record. Parquet
is the columnar format every analytical tool reads (pandas, DuckDB, pyarrow, Spark); it is
written with fastparquet, a small package (pyarrow's wheel is 25 times larger), so the runner
that saves a baseline needs nothing heavy.
"""

from __future__ import annotations

import hashlib
import io
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.errors import PerfguardError
from perfguard.files import write_bytes_atomic
from perfguard.records import Metrics, Run, VariantResult

if TYPE_CHECKING:
    import pandas as pd

SUMMARY_DIR = ".summary"
COLUMNS = (
    "machine",
    "commit",
    "created",
    "test",
    "variant",
    "metric",
    "value",
    "low",
    "high",
    "record",
    "accepted",
    "pair",
    "pair_verdict",
    "pair_change",
    "pair_low",
    "pair_high",
    "pair_p",
    "environment",
)
PAIR_COLUMNS = COLUMNS[COLUMNS.index("pair") : COLUMNS.index("environment")]
"""A paired change stored with the figure (main's paired run, same-job A/B): the commit it
was measured beside (HEAD's first parent), its verdict, the change in percent with its
interval, and its p-value; empty and NaN where the figure has none."""
OLD_LAYOUTS = (
    COLUMNS[: COLUMNS.index("accepted")],
    COLUMNS[: COLUMNS.index("pair")],
    COLUMNS[: COLUMNS.index("environment")],
)
COUNTER_METRICS = (
    "graphs",
    "aten_ops",
    "flops",
    "kernel_launches",
    "cudagraph_launches",
    "compile_instructions",
    "forward_instructions",
)
"""The exact counts kept as rows too (graph breaks and recompiles are metrics already)."""
METRIC_FIELDS = tuple(f.name for f in fields(Metrics))
TEXT_COLUMNS = (*COLUMNS[:6], "record", "accepted", "pair", "pair_verdict", "environment")
FLOAT_COLUMNS = tuple(c for c in COLUMNS if c not in TEXT_COLUMNS)
RUN_TEST, RUN_VARIANT, RUN_METRIC = "(the run)", "runner", "run_seconds"
"""The row of a run's cost (its runner seconds, `Run.cost`): main's cost per commit."""


class SummaryError(PerfguardError, ValueError):
    """A summary part that is not one: the message names it."""


def blob_id(content: bytes) -> str:
    """git's object id of a file with this content (`git hash-object`), computed here, so a
    part can be matched with its record from `git ls-tree` alone."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def _band(result: VariantResult, metric: str) -> tuple[float, float]:
    """The lowest and highest of a timed metric's per-repeat figures (`TIMED_METRICS`: the
    latency percentiles and a generation's phases, as their tests use them); NaN for other
    metrics."""
    from perfguard.stats.thresholds import TIMED_METRICS, repeat_figures

    per_repeat = repeat_figures(result, metric) if metric in TIMED_METRICS else []
    if len(per_repeat) < 2:
        return math.nan, math.nan
    return min(per_repeat), max(per_repeat)


def _counts(result: VariantResult) -> dict[str, float]:
    c = result.counters
    if c is None:
        return {}
    found = {name: getattr(c, name, None) for name in COUNTER_METRICS if name != "aten_ops"}
    found["aten_ops"] = c.op_total
    return {k: float(v) for k, v in found.items() if v is not None}


def stored(value: float) -> float:
    """`value` as the table keeps it: a whole number exactly (counts, bytes), any other to
    24 significant bits (float32's precision, about 7 digits, with float64's range). The
    records keep every figure exact; the table's figures are for series, and their last
    digits, random from run to run, would otherwise be most of its size."""
    if not math.isfinite(value) or value.is_integer():
        return value
    mantissa, exponent = math.frexp(value)
    return math.ldexp(round(mantissa * (1 << 24)), exponent - 24)


def rows_of(run: Run, record: str) -> list[tuple[Any, ...]]:
    """The table's rows of one baseline (its `ok` results), made from the record whose blob
    id is `record`."""
    out: list[tuple[Any, ...]] = []
    versions = environment_text(run)
    accepted: dict[tuple[str, str, str], str] = {
        (c.test, c.variant, c.metric): accepted_text(
            c.accepted.bound, c.accepted.reason, c.accepted.by
        )
        for c in run.comparisons
        if c.accepted is not None
    }
    pairs = paired_changes(run)
    for r in run.results:
        if r.status != "ok":
            continue
        figures = {m: getattr(r.metrics, m) for m in METRIC_FIELDS} | _counts(r)
        for metric, value in figures.items():
            if value is None:
                continue
            low, high = _band(r, metric)
            out.append(
                (
                    run.machine,
                    run.commit or "",
                    run.created or "",
                    r.test,
                    r.variant,
                    metric,
                    stored(float(value)),
                    stored(low),
                    stored(high),
                    record,
                    accepted.get((r.test, r.variant, metric), ""),
                    *pairs.get((r.test, r.variant, metric), NO_PAIR),
                    versions,
                )
            )
    if run.cost is not None:
        row = (RUN_TEST, RUN_VARIANT, RUN_METRIC, stored(run.cost.seconds), math.nan, math.nan)
        out.append(
            (run.machine, run.commit or "", run.created or "", *row, record, "", *NO_PAIR, versions)
        )
    return out


RUNTIME = ("torch", "cuda", "cudnn", "triton", "python", "gpu_driver", "device")
"""The environment's keys a commit's rows carry, beside the packages its tests ran."""


def environment_text(run: Run) -> str:
    """What a commit was measured with, compactly (`name=version`, space-separated): the
    runtime (torch, CUDA, cuDNN, Triton, Python, the driver, the device) and the installed
    packages its recorded tests ran (every package, without a record). One string per part,
    which Parquet stores once; history names what changed at a step from it."""
    env = run.environment
    packages = env.get("packages")
    if not isinstance(packages, dict):
        packages = {}
    if run.reach is not None and run.reach.distributions:
        packages = {k: v for k, v in packages.items() if k in set(run.reach.distributions)}
    runtime = {f"@{k}": env.get(k) for k in RUNTIME if env.get(k) is not None}
    return " ".join(f"{k}={str(v).replace(' ', '_')}" for k, v in {**runtime, **packages}.items())


def read_environment(text: str) -> dict[str, str]:
    """`environment_text` read back: runtime keys start with `@`."""
    out: dict[str, str] = {}
    for word in text.split():
        name, sep, version = word.partition("=")
        if sep:
            out[name] = version
    return out


NO_PAIR = ("", "", math.nan, math.nan, math.nan, math.nan)


def paired_changes(run: Run) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    """(test, variant, metric) -> the `PAIR_COLUMNS` of each change `run` measured beside
    its base commit (same-job A/B); none for a run compared with a stored baseline."""
    base = run.baseline
    if base.mode != "ab" or not base.commit:
        return {}
    out: dict[tuple[str, str, str], tuple[Any, ...]] = {}
    for c in run.comparisons:
        if c.scope != "metric" or c.change_pct is None:
            continue
        low, high = c.change_ci if c.change_ci is not None else (math.nan, math.nan)
        p = math.nan if c.p_value is None else c.p_value
        out[(c.test, c.variant, c.metric)] = (base.commit, c.verdict, c.change_pct, low, high, p)
    return out


def accepted_text(bound: str, reason: str, by: str) -> str:
    return f"{bound}: {reason}" + (f" ({by})" if by else "")


def frame(rows: Iterable[Sequence[Any]]) -> pd.DataFrame:
    import pandas as pd

    table = pd.DataFrame(list(rows), columns=list(COLUMNS))
    return table.astype({c: "float64" for c in FLOAT_COLUMNS} | {c: object for c in TEXT_COLUMNS})


def _fastparquet() -> Any:
    """fastparquet, imported without the deprecation warning it sets off in pandas 3 (it
    reads a pandas option when imported; nothing a user can act on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The 'future.infer_string' option")
        import fastparquet

    return fastparquet


def part_bytes(run: Run, record: str) -> bytes:
    """A summary part's content: the rows of `run`, as one Parquet file. The text columns
    are written dictionary-encoded (pandas categoricals), so that a reader makes each name
    once, not once a row: reading a year of parts was mostly making strings."""
    return part_bytes_of(frame(rows_of(run.compact(), record)))  # the record's rows, as stored


def part_bytes_of(table: pd.DataFrame) -> bytes:
    """A summary part's content: the rows of `table` (`COLUMNS`), as one Parquet file."""
    import pandas as pd

    fastparquet = _fastparquet()
    table = table.copy()
    for column in TEXT_COLUMNS:
        table[column] = pd.Categorical(table[column].astype(object))
    buffer = _Buffer()
    fastparquet.write(
        "part", table, compression="ZSTD", write_index=False, open_with=lambda *_: buffer
    )
    return buffer.written


class _Buffer(io.BytesIO):
    """An in-memory file that keeps its bytes when fastparquet closes it."""

    written = b""

    def close(self) -> None:
        self.written = self.getvalue()
        super().close()


def read_part(content: bytes, where: str) -> pd.DataFrame:
    """The rows of a part's bytes; `SummaryError` naming `where` when they are not a part."""
    fastparquet = _fastparquet()

    try:
        table: pd.DataFrame = fastparquet.ParquetFile(io.BytesIO(content)).to_pandas()
    except Exception as exc:  # fastparquet raises many kinds on a damaged file
        raise SummaryError(f"{where}: not a summary part ({type(exc).__name__}: {exc})") from None
    found = tuple(table.columns)
    if found in OLD_LAYOUTS:  # written before `accepted`, or before the paired changes
        for column in COLUMNS[len(found) :]:
            table[column] = "" if column in TEXT_COLUMNS else math.nan
        table.attrs[OLD_LAYOUT] = True  # made again from its record where there is one
    elif found != COLUMNS:
        raise SummaryError(f"{where}: not a summary part (columns {list(table.columns)})")
    return table


OLD_LAYOUT = "perfguard_old_layout"
"""The mark `read_part` leaves on a part of an older layout: stale where its record is at
hand (its rows are made again, with the columns it lacks), used as it is where not."""


def part_path(root: Path, machine: str, commit: str) -> Path:
    return root / SUMMARY_DIR / machine / f"{commit}.parquet"


def write_part(root: Path, run: Run, record_content: bytes) -> Path:
    """Write the part of `run` (stored as `record_content`) beside the records, atomically."""
    path = part_path(root, run.machine, run.commit or "")
    write_bytes_atomic(path, part_bytes(run, blob_id(record_content)))
    return path


@dataclass(frozen=True)
class Summary:
    """Rows of the summary table (`COLUMNS`), and where they came from."""

    table: pd.DataFrame
    parts_read: int = 0  # parts used as they were
    rebuilt: int = 0  # records read because their part was missing or stale
    skipped: tuple[str, ...] = ()  # "where: why" of the broken records left out

    def of_machine(self, machine: str) -> Summary:
        rows = self.table[self.table["machine"] == machine]
        return Summary(rows, self.parts_read, self.rebuilt, self.skipped)

    def measured(self) -> list[tuple[str, str, str]]:
        """(machine, commit, created) of every baseline with rows."""
        if self.table.empty:
            return []
        keys = self.table[["machine", "commit", "created"]].drop_duplicates()
        return [(str(m), str(c), str(t)) for m, c, t in keys.itertuples(index=False)]


def summary_of_runs(runs: Iterable[Run]) -> Summary:
    """The table of runs already read (no parts): for tests and studies."""
    return Summary(frame(row for run in runs for row in rows_of(run, "")))


def concat_parts(tables: list[pd.DataFrame], metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows of `tables` (parts) as one table, with the table's columns when none has any;
    only the rows of `metrics` when given. Its text columns are categoricals (one string per
    name, codes per row: a year of a large suite is millions of rows)."""
    import numpy as np
    import pandas as pd
    from pandas.api.types import union_categoricals

    if metrics is not None:
        wanted = list(metrics)
        tables = [t if (keep := t["metric"].isin(wanted)).all() else t[keep] for t in tables]
    tables = [t for t in tables if not t.empty]
    if not tables:
        return frame([])
    columns: dict[str, Any] = {}
    for column in COLUMNS:
        if column in TEXT_COLUMNS:
            columns[column] = union_categoricals(
                [_categorical(t[column]) for t in tables], ignore_order=True
            )
        else:
            columns[column] = np.concatenate([t[column].to_numpy(dtype=float) for t in tables])
    # copy=False: the columns as they are, not copied into one block (a year of a large
    # suite is ten million rows: that copy took longer than reading them)
    return pd.DataFrame(columns, copy=False)


def _categorical(column: pd.Series) -> pd.Categorical:
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        found: pd.Categorical = column.array
        return found
    return pd.Categorical(column.astype(object))


def current(part: pd.DataFrame, record: str) -> bool:
    """Whether `part` holds the rows of the record whose blob id is `record`, in this
    layout."""
    if part.attrs.get(OLD_LAYOUT):
        return False
    return part.empty or bool((part["record"] == record).all())
