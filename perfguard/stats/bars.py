"""A pull request does not loosen its own bar.

The settings a run is judged by come from its own tree (markers, ini, options), so a pull
request that writes `@pytest.mark.perfguard(ab_min_change_pct=100000)` beside its slowdown
would pass it. A setting the head loosens against the base commit's is judged by the base's
value instead, and the run records each one (`settings.loosened`), which the report names: a
change that is slower on purpose belongs in the accept file, which is reviewed, bounded and
expires. A setting made stricter applies at once. Which way each setting loosens is its row
of the settings table (`perfguard.settings.Setting.loosens`):

- the verdict rules (`Thresholds`: a higher minimum change or tolerance, a lower alpha, a
  gate switched off), guarded where the run is compared (`guard`);
- the settings that withhold or soften a verdict (`GUARDED_RUN`: `unhealthy` set to
  inconclusive, more confirmation rounds to withdraw it, `fail_on` never), judged at the
  finish, and those that take the power to see it (`GUARDED_ITEM`: fewer repeats, a shorter
  budget, a wider drift tolerance), judged before each item is measured (`floors`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from perfguard.settings import GUARDED, GUARDED_ITEM, SETTINGS
from perfguard.stats.thresholds import Thresholds

RULES = tuple(s.marker for s in SETTINGS if s.threshold and s.marker)
"""The verdict rules (`Thresholds`' fields), by marker key."""
RUN = "*"  # a loosened setting of the whole run (ini or command line), not of one test


@dataclass(frozen=True)
class Loosened:
    """A setting the head loosened: the test ("*": the whole run), the setting, both
    values."""

    test: str
    rule: str
    head: Any
    base: Any

    def to_json(self) -> dict[str, Any]:
        return {"test": self.test, "rule": self.rule, "head": self.head, "base": self.base}


def looser(rule: str, head: Any, base: Any) -> bool:
    """Whether `head` softens or withholds more verdicts than `base` (`rule`: a marker key
    or an option's field)."""
    how = GUARDED[rule].loosens
    if head == base:
        return False
    if how == "later":
        choices = GUARDED[rule].choices
        return bool(choices.index(str(head)) > choices.index(str(base)))
    if how == "changed":
        return not _stricter_everywhere(head, base)
    if head is None or base is None:
        return head is None  # dropping a value the base set; setting one is the head's
    return bool(head < base) if how == "lower" else bool(head > base)


def _stricter_everywhere(head: Any, base: Any) -> bool:
    """A drift tolerance at least as strict as the base's in every part (None: the class's
    own, which a value of the head's may tighten but not replace where the base set one)."""
    if base is None:
        return head is None
    if isinstance(base, int | float) and isinstance(head, int | float):
        return bool(head <= base)
    if isinstance(base, Mapping) and isinstance(head, Mapping):
        return all(k in head and head[k] <= v for k, v in base.items()) and set(head) <= set(base)
    return False


def judged(rule: str, head: Any, base: Any) -> Any:
    """The value a setting is judged by: the head's, unless it loosens the base's."""
    return base if looser(rule, head, base) else head


def guard_values(
    head: Mapping[str, Any], base: Mapping[str, Any] | None, names: Sequence[str], test: str = RUN
) -> tuple[dict[str, Any], tuple[Loosened, ...]]:
    """`head`'s settings among `names`, each the base's where the head loosens it (a name
    the base does not record stands); and what was put back."""
    out = dict(head)
    found: list[Loosened] = []
    for name in names:
        if base is None or name not in base or name not in head:
            continue
        if looser(name, head[name], base[name]):
            out[name] = base[name]
            found.append(Loosened(test, name, head[name], base[name]))
    return out, tuple(found)


def floors(
    head: Mapping[str, Any],
    head_tests: Mapping[str, Mapping[str, Any]],
    base: Mapping[str, Any] | None,
    base_tests: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, dict[str, Any]], tuple[Loosened, ...]]:
    """Each test's item settings (`GUARDED_ITEM`) as they will be judged: the head's run
    values and markers (`head`, `head_tests`), with the base's (`base`, `base_tests`) wherever
    the head loosens them; by test, and what was put back. A test the base lacks is the
    head's own (there is nothing to loosen)."""
    out: dict[str, dict[str, Any]] = {}
    found: list[Loosened] = []
    for test in head_tests:
        if base is None or test not in base_tests:
            continue
        mine = {**{k: head.get(k) for k in GUARDED_ITEM}, **head_tests[test]}
        theirs = {**{k: base.get(k) for k in GUARDED_ITEM}, **base_tests[test]}
        values, put_back = guard_values(mine, theirs, GUARDED_ITEM, test)
        if put_back:
            out[test] = {p.rule: values[p.rule] for p in put_back}
            found.extend(put_back)
    return out, tuple(found)


def guard(head: Thresholds, base: Thresholds | None) -> tuple[Thresholds, tuple[Loosened, ...]]:
    """`head` with every rule it loosens against `base` (the base commit's thresholds) put
    back to the base's, for the run and for each test; and what was put back. No base: the
    head's stand."""
    if base is None:
        return head, ()
    found: list[Loosened] = []
    run_level: dict[str, Any] = {}
    for rule in RULES:
        h, b = getattr(head, rule), getattr(base, rule)
        if looser(rule, h, b):
            run_level[rule] = b
            found.append(Loosened(RUN, rule, h, b))
    guarded = replace(head, **run_level)
    per_test: dict[str, dict[str, Any]] = {t: dict(v) for t, v in head.per_test.items()}
    for test in sorted({*head.per_test, *base.per_test}):
        mine, theirs = guarded.for_test(test), base.for_test(test)
        for rule in RULES:
            h, b = getattr(mine, rule), getattr(theirs, rule)
            if looser(rule, h, b):  # its marker loosened it, or dropped a stricter one
                per_test.setdefault(test, {})[rule] = b
                found.append(Loosened(test, rule, h, b))
    return replace(guarded, per_test=per_test), tuple(found)


def read_guarded(data: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]] | None:
    """A record's guarded settings (`settings.guarded`: {"run": ..., "tests": {test: ...}}),
    each value checked as its setting's row says (a value out of bounds is left out: from a
    file, it must not set how long an item is measured); None where the record has none
    (written before they were recorded: nothing to judge by)."""
    from perfguard.bounds import check
    from perfguard.records.base import RecordError

    if not isinstance(data, Mapping) or not isinstance(data.get("run"), Mapping):
        return None

    def checked(values: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in values.items() if isinstance(values, Mapping) else ():
            row = GUARDED.get(name)
            if row is None:
                continue
            if row.choices:
                if value in row.choices:
                    out[name] = value
                continue
            try:
                out[name] = check(row, value, name, error=RecordError)
            except RecordError:
                continue
        return out

    tests = data.get("tests")
    per_test = tests if isinstance(tests, Mapping) else {}
    return checked(data["run"]), {str(t): checked(v) for t, v in per_test.items()}


def loosened_json(found: Sequence[Loosened]) -> list[dict[str, Any]]:
    return [f.to_json() for f in found]


def loosened_of(settings: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """What a run's settings say was loosened (for the report): only entries of known
    settings with plain values (numbers, a choice of the setting's, a tolerance's numbers), so
    that nothing from a file reaches the report unescaped."""
    value = settings.get("loosened") or []
    if not isinstance(value, list):
        return []
    return [
        v
        for v in value
        if isinstance(v, Mapping)
        and v.get("rule") in GUARDED
        and isinstance(v.get("test"), str)
        and all(_plain(v["rule"], v.get(k)) for k in ("head", "base"))
    ]


def _plain(rule: str, value: Any) -> bool:
    if value is None or isinstance(value, int | float):
        return True
    if isinstance(value, str):
        return value in GUARDED[rule].choices
    if isinstance(value, Mapping):
        return all(
            isinstance(k, str) and k.isidentifier() and isinstance(v, int | float)
            for k, v in value.items()
        )
    return False
