"""Plain data that flows through the pipeline: results, runs, comparisons.

Everything here is immutable, validated on construction, and free of torch and
pytest, so that the report, compare and merge commands run anywhere.
The JSON layout is the public results format (docs/reference.md, "Results JSON");
`to_json`/`from_json` are its only writers and readers.
"""

from perfguard.records.base import (
    METRICS,
    SCHEMA_VERSION,
    SHA,
    STATUSES,
    VERDICTS,
    Metric,
    RecordError,
    Status,
    Verdict,
)
from perfguard.records.comparisons import BESIDE, FRESH, Accepted, Comparison, Confirmation
from perfguard.records.counters import Counters
from perfguard.records.gaps import Gap
from perfguard.records.reasons import Reason, reason
from perfguard.records.results import (
    Details,
    DriftCheck,
    Metrics,
    VariantResult,
    trace_file_name,
)
from perfguard.records.runs import BaselineRef, Run, RunCost
from perfguard.records.selection import Selection, Unaffected

__all__ = [
    "BESIDE",
    "FRESH",
    "METRICS",
    "SCHEMA_VERSION",
    "SHA",
    "STATUSES",
    "VERDICTS",
    "Accepted",
    "BaselineRef",
    "Comparison",
    "Confirmation",
    "Counters",
    "Details",
    "DriftCheck",
    "Gap",
    "Metric",
    "Metrics",
    "Reason",
    "RecordError",
    "Run",
    "RunCost",
    "Selection",
    "Status",
    "Unaffected",
    "VariantResult",
    "Verdict",
    "reason",
    "trace_file_name",
]
