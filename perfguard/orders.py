"""A child session's orders: what the session that started it asks of it, in one value.

The sessions perfguard starts itself (an A/B driver's workers, a confirmation round, a
re-measure that records allocation sites, a process counted under callgrind) are told what
to do in one environment variable, `PERFGUARD_ORDERS`, written once by the parent as JSON
(as pytest-xdist's controller writes `workerinput`), and read once, by the plugin, into an
`Orders`. The measuring code takes what it needs of them as arguments and reads no
environment. A user's session has no orders (every field empty).

An A/B driver passes its own orders on to its workers (a confirmation round's driver asks
its workers to load the compile cache too), with each worker's own added.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from perfguard.errors import PerfguardError

ENV = "PERFGUARD_ORDERS"
"""The one variable a session perfguard starts is given (JSON)."""


class OrdersError(PerfguardError, ValueError):
    """The orders do not read (a parent of another perfguard version, a hand-written value)."""


@dataclass(frozen=True)
class Orders:
    """See the module's docstring. Every field empty: a session the user started."""

    side: str | None = None  # an A/B worker's tree: "A" (the base) or "B" (this tree)
    address: str | None = None  # the driver's socket, and its key (hex)
    key: str | None = None
    items: str | None = None  # a file of the node ids to run, in the driver's order
    traces: str | None = None  # where every process of the run writes its Chrome traces
    reach: str | None = None  # where this worker writes what each test ran (its record)
    compile_cache: str | None = None  # "load" main's compiled artifacts, or "write" them
    sites: bool = False  # record each item's allocation sites (a memory verdict explained)
    instructions: tuple[str, ...] = ()  # under callgrind: the regions to count ...
    shim: str | None = None  # ... and the library that turns counting on and off
    # `perfguard calibrate`: its rounds, canaries and output (what the driving session runs
    # instead of one comparison per item), and the check of its predictions: every item's
    # calls on this tree's side made this share slower in a plain A/B run
    calibrate: dict[str, Any] | None = None
    canary_pct: float | None = None
    # `perfguard bisect --package`: the interpreter of the environment this tree's side runs
    # in (with `--perfguard-ab-env` for the other side's)
    head_python: str | None = None

    @property
    def worker(self) -> bool:
        """Whether this session is an A/B worker (it has a driver to connect to)."""
        return self.address is not None

    def with_(self, **more: Any) -> Orders:
        return replace(self, **more)

    def for_workers(self) -> Orders:
        """What an A/B driver passes on to its workers: its orders but for those addressed
        to the driving session alone (a calibration's, a canary's)."""
        return replace(self, calibrate=None, canary_pct=None, head_python=None)

    def env(self) -> dict[str, str]:
        """The environment entry that gives these orders to a child."""
        data = {k: v for k, v in asdict(self).items() if v not in (None, False, (), [])}
        return {ENV: json.dumps(data, sort_keys=True)}

    @classmethod
    def from_json(cls, text: str) -> Orders:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise OrdersError(f"{ENV} is not JSON ({exc})") from None
        if not isinstance(data, Mapping):
            raise OrdersError(f"{ENV} must be an object, got {data!r}")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise OrdersError(f"{ENV} has unknown orders {sorted(unknown)}")
        if "instructions" in data:
            data = {**data, "instructions": tuple(data["instructions"])}
        return cls(**data)


def from_environment(environ: Mapping[str, str] | None = None) -> Orders:
    """This session's orders (none: a session the user started)."""
    text = (os.environ if environ is None else environ).get(ENV)
    return Orders() if not text else Orders.from_json(text)


def child_environment(orders: Orders, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child session given `orders`: this process's (or `base`), with
    its own orders replaced."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != ENV}
    env.update(orders.env())
    return env
