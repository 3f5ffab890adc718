"""One session's results: the body of a results file and of a baseline file."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from perfguard.bounds import check
from perfguard.records.base import SCHEMA_VERSION, SHA, RecordError, text
from perfguard.records.comparisons import Comparison
from perfguard.records.gaps import Gap
from perfguard.records.op_times import OpChange, changes_from_json
from perfguard.records.reach import Reach
from perfguard.records.results import VariantResult
from perfguard.records.selection import Selection
from perfguard.settings import BY_FIELD, RECORDED


@dataclass(frozen=True, kw_only=True)
class BaselineRef:
    """Which baseline a run was compared with, and why that one."""

    commit: str | None
    reason: str
    environment: Mapping[str, Any] | None = None  # the baseline's, to show both sides
    mode: str = "stored"  # "stored": a baseline file; "ab": measured in this job (same-job A/B)
    # same-job A/B: the environment the base side ran in ({"how": built, given, same or
    # failed, "changed": the dependency files, "installer", "seconds", "cached", "python"})
    runs_in: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.environment is not None and not isinstance(self.environment, Mapping):
            raise RecordError(f"baseline.environment must be an object, got {self.environment!r}")
        if self.mode not in ("stored", "ab"):
            raise RecordError(f"baseline.mode must be 'stored' or 'ab', got {self.mode!r}")
        if self.runs_in is not None:
            _check_runs_in(self.runs_in)

    def to_json(self) -> dict[str, Any]:
        out = {
            "commit": self.commit,
            "reason": self.reason,
            "environment": None if self.environment is None else dict(self.environment),
            "mode": self.mode,
        }
        if self.runs_in is not None:
            out["runs_in"] = dict(self.runs_in)
        return out


RUNS_IN_HOW = ("built", "given", "same", "failed")
_RUNS_IN_TEXT = ("python", "installer", "key", "error")


def _check_runs_in(runs_in: object) -> None:
    """`baseline.runs_in` as a run writes it: `how` one of RUNS_IN_HOW, `changed` a list of
    file names, `seconds` a number, `cached` true or false, the rest text."""
    if not isinstance(runs_in, Mapping):
        raise RecordError(f"baseline.runs_in must be an object, got {runs_in!r}")
    if runs_in.get("how") not in RUNS_IN_HOW:
        raise RecordError(
            f"baseline.runs_in.how must be one of {', '.join(RUNS_IN_HOW)}, "
            f"got {runs_in.get('how')!r}"
        )
    changed = runs_in.get("changed", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        raise RecordError(f"baseline.runs_in.changed must be a list of file names, got {changed!r}")
    seconds = runs_in.get("seconds", 0)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise RecordError(f"baseline.runs_in.seconds must be a number of seconds, got {seconds!r}")
    if not isinstance(runs_in.get("cached", False), bool):
        raise RecordError(
            f"baseline.runs_in.cached must be true or false, got {runs_in['cached']!r}"
        )
    for name in _RUNS_IN_TEXT:
        if not isinstance(runs_in.get(name, ""), str):
            raise RecordError(f"baseline.runs_in.{name} must be text, got {runs_in[name]!r}")


@dataclass(frozen=True, kw_only=True)
class RunCost:
    """What a run cost on the runner that measured it: a team watches its GPU minutes. The
    shards of a merged run are summed (each ran on a runner of its own)."""

    seconds: float  # all of it: measuring (both sides in A/B) and comparing and confirming
    measure_s: float  # from the session's start to its end of measuring
    confirm_s: float  # comparing, and measuring flagged items again
    items: int  # results measured
    shards: int = 1

    def __post_init__(self) -> None:
        for name in ("seconds", "measure_s", "confirm_s", "items", "shards"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RecordError(f"cost.{name} must be a number, got {value!r}")
            if not (math.isfinite(value) and value >= 0):
                raise RecordError(f"cost.{name} must be 0 or more, got {value!r}")

    @classmethod
    def between(cls, started: float, finishing: float, done: float, items: int) -> RunCost:
        """From `time.monotonic()` readings: the session's start, its end of measuring, and
        the end of comparing and confirming."""
        return cls(
            seconds=done - started,
            measure_s=finishing - started,
            confirm_s=done - finishing,
            items=items,
        )

    def __add__(self, other: RunCost) -> RunCost:
        return RunCost(
            seconds=self.seconds + other.seconds,
            measure_s=self.measure_s + other.measure_s,
            confirm_s=self.confirm_s + other.confirm_s,
            items=self.items + other.items,
            shards=self.shards + other.shards,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "measure_s": round(self.measure_s, 3),
            "confirm_s": round(self.confirm_s, 3),
            "items": self.items,
            "shards": self.shards,
        }

    @classmethod
    def from_json(cls, data: Any) -> RunCost:
        if not isinstance(data, Mapping):
            raise RecordError(f"cost must be an object, got {data!r}")
        try:
            return cls(
                **{k: data[k] for k in ("seconds", "measure_s", "confirm_s", "items")},
                shards=data.get("shards", 1),
            )
        except KeyError as exc:
            raise RecordError(f"cost lacks the key {exc.args[0]!r}") from None


def _check_commit(name: str, value: object) -> None:
    if value is not None and not (isinstance(value, str) and SHA.match(value)):
        raise RecordError(f"{name} must be a full commit sha or null, got {value!r}")


def _check_settings(settings: Mapping[str, Any]) -> None:
    """The settings the report shows and a merge carries on, each by its row of the settings
    table (thresholds are checked where the gate reads them; `confirm` is the rounds a
    flagged verdict had to survive): the wrong type is a wrong file, not a figure to print."""
    for row in (*RECORDED, BY_FIELD["confirm"]):
        value = settings.get(row.field)
        if value is None:
            continue
        if row.bounds is not None or row.choices:
            check(row, value, f"settings.{row.field}", error=RecordError)
        elif not isinstance(value, str):  # a shard ("1/4"), a revision
            raise RecordError(f"settings.{row.field} must be a string, got {value!r}")
    _check_guarded(settings.get("guarded"))


def _check_guarded(guarded: Any) -> None:
    """`settings.guarded` (the settings a later change may not loosen: {"run": {...},
    "tests": {test: {...}}}), each value by its row: a base's value decides a verdict."""
    if guarded is None:
        return
    if not isinstance(guarded, Mapping) or not isinstance(guarded.get("run"), Mapping):
        raise RecordError(f"settings.guarded must be an object with a run object, got {guarded!r}")
    tests = guarded.get("tests") or {}
    if not isinstance(tests, Mapping):
        raise RecordError(f"settings.guarded.tests must be an object, got {tests!r}")
    named = {"run": guarded["run"], **{f"tests.{t}": v for t, v in tests.items()}}
    for where, values in named.items():
        if not isinstance(values, Mapping):
            raise RecordError(f"settings.guarded.{where} must be an object, got {values!r}")
        for name, value in values.items():
            row = BY_FIELD.get(name)
            if value is not None and row is not None and (row.bounds is not None or row.choices):
                check(row, value, f"settings.guarded.{where}.{name}", error=RecordError)


def _listed(data: Mapping[str, Any], key: str) -> Sequence[Any]:
    value = data.get(key) or ()
    if not isinstance(value, list | tuple):
        raise RecordError(f"{key} must be a list, got {value!r}")
    return value


def _check_health(health: Mapping[str, Any]) -> None:
    warnings, facts = health.get("warnings"), health.get("facts")
    if warnings is not None and not (
        isinstance(warnings, list | tuple) and all(isinstance(w, str) for w in warnings)
    ):
        raise RecordError(f"health.warnings must be a list of strings, got {warnings!r}")
    if facts is not None and not isinstance(facts, Mapping):
        raise RecordError(f"health.facts must be an object, got {facts!r}")


@dataclass(frozen=True, kw_only=True)
class Run:
    """One session's results: the body of a results file and of a baseline file."""

    commit: str | None
    machine: str
    environment: Mapping[str, Any]
    results: tuple[VariantResult, ...]
    baseline: BaselineRef = field(
        default_factory=lambda: BaselineRef(commit=None, reason="not compared")
    )
    comparisons: tuple[Comparison, ...] = ()
    # each operator's and kernel's change, where both sides kept their times (`OpChange`)
    op_comparisons: tuple[OpChange, ...] = ()
    created: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    health: Mapping[str, Any] = field(default_factory=dict)  # {"warnings": [...], "facts": {...}}
    baseline_results: tuple[VariantResult, ...] = ()  # same-job A/B: the base side's results
    # confirmation re-measures of flagged items, one tuple per round ...
    confirm_results: tuple[tuple[VariantResult, ...], ...] = ()
    # ... and, for a round measured beside the base commit (A/B), that commit's side
    confirm_base_results: tuple[tuple[VariantResult, ...], ...] = ()
    accept_error: str | None = None  # why the accept file could not be read: none applied
    cost: RunCost | None = None  # what the run cost on its runner(s)
    incomplete: tuple[Gap, ...] = ()  # what it was asked to measure and did not
    selection: Selection | None = None  # a pull request's partial run: what it left out
    reach: Reach | None = None  # a full run's record of what each perf test ran

    def __post_init__(self) -> None:
        _check_commit("commit", self.commit)
        _check_commit("baseline commit", self.baseline.commit)
        if not isinstance(self.machine, str):
            raise RecordError(f"machine must be a string, got {self.machine!r}")
        if self.created is not None and not isinstance(self.created, str):
            raise RecordError(f"created must be a date string or null, got {self.created!r}")
        if self.accept_error is not None:
            text("accept_error", self.accept_error)
        for name in ("environment", "settings", "health"):
            if not isinstance(getattr(self, name), Mapping):
                raise RecordError(f"{name} must be an object, got {getattr(self, name)!r}")
        _check_health(self.health)
        _check_settings(self.settings)
        object.__setattr__(self, "health", dict(self.health))
        object.__setattr__(self, "results", tuple(self.results))
        object.__setattr__(self, "baseline_results", tuple(self.baseline_results))
        object.__setattr__(self, "confirm_results", tuple(map(tuple, self.confirm_results)))
        object.__setattr__(
            self, "confirm_base_results", tuple(map(tuple, self.confirm_base_results))
        )
        object.__setattr__(self, "comparisons", tuple(self.comparisons))
        object.__setattr__(self, "op_comparisons", tuple(self.op_comparisons))
        object.__setattr__(self, "incomplete", tuple(self.incomplete))
        if not all(isinstance(g, Gap) for g in self.incomplete):
            raise RecordError("incomplete must hold gaps")
        object.__setattr__(self, "environment", dict(self.environment))
        object.__setattr__(self, "settings", dict(self.settings))
        seen: set[tuple[str, str]] = set()
        for result in self.results:
            if result.key in seen:
                raise RecordError(f"duplicate result for {result.test} [{result.variant}]")
            seen.add(result.key)

    def result(self, test: str, variant: str) -> VariantResult | None:
        return self._by_key.get((test, variant))

    @functools.cached_property
    def _by_key(self) -> dict[tuple[str, str], VariantResult]:
        """The results by (test, variant): a comparison of a 500-test suite looks up every
        one, and a scan each time made it quadratic."""
        return {r.key: r for r in self.results}

    @property
    def health_warnings(self) -> tuple[str, ...]:
        return tuple(str(w) for w in self.health.get("warnings") or ())

    @property
    def has_regression(self) -> bool:
        return any(c.verdict == "regression" and c.gating for c in self.comparisons) or any(
            c.verdict == "regression" and c.gating for c in self.op_comparisons
        )

    @property
    def complete(self) -> bool:
        """Whether the run measured everything it was asked to (no gap)."""
        return not self.incomplete

    def compact(self) -> Run:
        """The run as a baseline stores it: results without raw samples, and none of the
        other runs a comparison brought in (base side, confirmation rounds)."""
        return replace(
            self,
            results=tuple(r.compact() for r in self.results),
            baseline_results=(),
            confirm_results=(),
            confirm_base_results=(),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "commit": self.commit,
            "machine": self.machine,
            "created": self.created,
            "environment": dict(self.environment),
            "settings": dict(self.settings),
            "health": dict(self.health),
            "baseline": self.baseline.to_json(),
            "results": [r.to_json() for r in self.results],
            "comparisons": [c.to_json() for c in self.comparisons],
            **(
                {"op_comparisons": [c.to_json() for c in self.op_comparisons]}
                if self.op_comparisons
                else {}
            ),
            "incomplete": [g.to_json() for g in self.incomplete],
            **({"accept_error": self.accept_error} if self.accept_error else {}),
            **({"cost": self.cost.to_json()} if self.cost is not None else {}),
            **({"selection": self.selection.to_json()} if self.selection is not None else {}),
            **({"reach": self.reach.to_json()} if self.reach is not None else {}),
            **(
                {"baseline_results": [r.to_json() for r in self.baseline_results]}
                if self.baseline_results
                else {}
            ),
            **(
                {"confirm_results": [[r.to_json() for r in rs] for rs in self.confirm_results]}
                if self.confirm_results
                else {}
            ),
            **(
                {
                    "confirm_base_results": [
                        [r.to_json() for r in rs] for rs in self.confirm_base_results
                    ]
                }
                if any(self.confirm_base_results)
                else {}
            ),
        }

    @classmethod
    def from_json(cls, data: Any) -> Run:
        """Read a current-version document. Older versions go through `store.schema` first."""
        if not isinstance(data, Mapping):
            raise RecordError("the document is not a JSON object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise RecordError(f"schema_version {version!r} is not {SCHEMA_VERSION}")
        try:
            baseline = data.get("baseline") or {}
            results: Sequence[Any] = data["results"]
            return cls(
                commit=data.get("commit"),
                machine=data["machine"],
                environment=data.get("environment") or {},
                results=tuple(VariantResult.from_json(r) for r in results),
                baseline=BaselineRef(
                    commit=baseline.get("commit"),
                    reason=text("baseline.reason", baseline.get("reason", "")),
                    environment=baseline.get("environment"),
                    mode=text("baseline.mode", baseline.get("mode") or "stored"),
                    runs_in=baseline.get("runs_in"),
                ),
                comparisons=tuple(Comparison.from_json(c) for c in data.get("comparisons") or ()),
                op_comparisons=changes_from_json(data.get("op_comparisons")),
                created=data.get("created"),
                accept_error=data.get("accept_error"),
                incomplete=tuple(Gap.from_json(g) for g in _listed(data, "incomplete")),
                cost=None if data.get("cost") is None else RunCost.from_json(data["cost"]),
                selection=None
                if data.get("selection") is None
                else Selection.from_json(data["selection"]),
                reach=None if data.get("reach") is None else Reach.from_json(data["reach"]),
                settings=data.get("settings") or {},
                health=data.get("health") or {},
                baseline_results=tuple(
                    VariantResult.from_json(r) for r in data.get("baseline_results") or ()
                ),
                confirm_results=tuple(
                    tuple(VariantResult.from_json(r) for r in rs)
                    for rs in data.get("confirm_results") or ()
                ),
                confirm_base_results=tuple(
                    tuple(VariantResult.from_json(r) for r in rs)
                    for rs in data.get("confirm_base_results") or ()
                ),
            )
        except KeyError as exc:
            raise RecordError(f"the document lacks the key {exc.args[0]!r}") from exc
        except (TypeError, AttributeError, ValueError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"the document has the wrong shape: {exc}") from exc
