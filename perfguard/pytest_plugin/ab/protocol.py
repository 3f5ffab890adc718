"""Every message of same-job A/B, declared once: what the driver tells a worker, and what a
worker tells the driver.

One session of one worker, in order:

    worker                      driver
    Collected(items, cuda, env) ->             (after Items(items), when launched early)
    Next(item)              ->
                            <-  Go | Skip
    Built                   ->                 (the item's variant is built)
                            <-  Time
    Ready(repeats, ...)     ->                 (compiled and warmed up)
                            <-  Block          (one block per command)
    Times(times)            ->
                            <-  Ops            (one profiled block per command)
    OpsTaken(places)        ->
                            <-  Finish
    Result(item, ...)       ->                 (when the item measured something)
    Ended(item, outcome)    ->

On the wire a message is a plain dict, `{"kind": ..., **fields}` (what
`multiprocessing.connection` pickles); `decode` turns one back into its class and refuses a
kind or field it does not know, naming it.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, ClassVar, TypeVar, get_args

from perfguard.errors import PerfguardError


class ProtocolError(PerfguardError, ValueError):
    """A message that is not one of the protocol's, or not where it may come."""


@dataclass(frozen=True)
class _Message:
    KIND: ClassVar[str]

    def wire(self) -> dict[str, Any]:
        return {"kind": self.KIND, **asdict(self)}


# the driver's commands


@dataclass(frozen=True)
class Items(_Message):
    """The node ids to run, in the driver's order (to a worker launched before it knew)."""

    KIND = "items"
    items: tuple[str, ...]


@dataclass(frozen=True)
class Go(_Message):
    """Run the item the worker asked about; `floor`: the item settings it is measured with
    where this tree loosened the base's (`perfguard.stats.bars.floors`: budget, repeats,
    drift tolerance), the same on both sides."""

    KIND = "go"
    floor: dict[str, Any] | None = None


@dataclass(frozen=True)
class Skip(_Message):
    """Do not run it: the driver did not run it on the other side."""

    KIND = "skip"


@dataclass(frozen=True)
class Time(_Message):
    """This side's turn: compile and warm up the built variant."""

    KIND = "time"


@dataclass(frozen=True)
class Block(_Message):
    """Time one block now; `slower_ms`: each call of it made that much slower (a canary of
    `perfguard calibrate`: a known slowdown where a regression would act)."""

    KIND = "block"
    slower_ms: float = 0.0


@dataclass(frozen=True)
class Ops(_Message):
    """Take one profiled block now (each operator's or kernel's time, untimed)."""

    KIND = "ops"


@dataclass(frozen=True)
class Finish(_Message):
    """Sampling is over: finish the item."""

    KIND = "finish"


# the worker's reports


@dataclass(frozen=True)
class Collected(_Message):
    """What the worker collected of the driver's items, and whether CUDA is there; the
    modules of its tree that did not collect (`where: first line`), and the perf items of
    its tree the driver did not ask for (`[test, variant]`: a test the other tree deleted)."""

    KIND = "collected"
    items: tuple[str, ...]
    cuda: bool | None
    errors: tuple[str, ...] = ()
    others: tuple[tuple[str, str], ...] = ()
    thresholds: dict[str, Any] | None = None  # its tree's rules (`Thresholds.to_json`)
    environment: dict[str, Any] | None = None  # what it measures on (torch, the device)
    # its tree's guarded settings (`perfguard.stats.bars`): {"run": its ini's, "tests": its
    # markers'}, what a change of the other tree is judged against
    settings: dict[str, Any] | None = None


@dataclass(frozen=True)
class Next(_Message):
    """The worker is about to run `item`; may it?"""

    KIND = "next"
    item: str


@dataclass(frozen=True)
class Built(_Message):
    """The item's variant is built; the worker waits for its turn."""

    KIND = "built"


@dataclass(frozen=True)
class Ready(_Message):
    """Compiled and warmed up: the blocks its settings ask for, after `warmup_calls`, and a
    call's time at the end of the warm-up (`call_ms`: what a canary's delay is a share of)."""

    KIND = "ready"
    repeats: int
    warmup_calls: int
    call_ms: float | None = None
    op_blocks: int = 0  # the profiled blocks its settings ask for


@dataclass(frozen=True)
class Times(_Message):
    """One block's timings, in milliseconds."""

    KIND = "times"
    times: tuple[float, ...]


@dataclass(frozen=True)
class OpsTaken(_Message):
    """A profiled block was taken: how many places it kept (0: none could be taken here)."""

    KIND = "ops_taken"
    places: int


@dataclass(frozen=True)
class Result(_Message):
    """The item's result (`VariantResult.to_json`) and the worker's environment."""

    KIND = "result"
    item: str
    result: dict[str, Any]
    environment: dict[str, Any] | None


@dataclass(frozen=True)
class Ended(_Message):
    """How the item ended: pytest's outcome and its one-line message."""

    KIND = "ended"
    item: str
    outcome: str
    message: str


M = TypeVar("M", bound=_Message)

Message = Items | Go | Skip | Time | Block | Ops | Finish
Report = Collected | Next | Built | Ready | Times | OpsTaken | Result | Ended

KINDS: dict[str, type[_Message]] = {
    cls.KIND: cls for cls in (*get_args(Message), *get_args(Report))
}


def decode(data: object) -> _Message:
    """The message a wire dict holds; ProtocolError for anything else."""
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        kind = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise ProtocolError(f"not an A/B message: {kind!r}")
    cls = KINDS[data["kind"]]
    names = {f.name for f in fields(cls)}
    needed = {f.name for f in fields(cls) if f.default is MISSING}
    given = set(data) - {"kind"}
    if not needed <= given <= names:  # a field with a default may be left out
        raise ProtocolError(
            f"A/B message {cls.KIND!r}: expected fields {sorted(names)}, got {sorted(given)}"
        )
    # a tuple field travels as a list (and is held as a tuple again)
    values = {f.name: data[f.name] for f in fields(cls) if f.name in given}
    tuples = {f.name for f in fields(cls) if str(f.type).startswith("tuple")}
    return cls(**{k: tuple(v) if k in tuples else v for k, v in values.items()})


def command(data: object) -> Message:
    """The driver's command a wire dict holds (a worker reads these)."""
    message = decode(data)
    if not isinstance(message, Message):
        raise ProtocolError(f"A/B message {message.KIND!r} is a worker's, sent to a worker")
    return message


def report(data: object) -> Report:
    """The worker's report a wire dict holds (the driver reads these)."""
    message = decode(data)
    if not isinstance(message, Report):
        raise ProtocolError(f"A/B message {message.KIND!r} is the driver's, sent to the driver")
    return message


def unexpected(message: _Message, *due: type[_Message]) -> ProtocolError:
    """The error for a message that may not come here (`due`: the ones that may)."""
    names = " or ".join(d.KIND for d in due)
    return ProtocolError(f"A/B message {message.KIND!r} where {names} was due")


def expect(message: _Message, *due: type[M]) -> M:
    """`message`, when it is one of `due`, the messages that may come here; else the
    `unexpected` error."""
    if not isinstance(message, due):
        raise unexpected(message, *due)
    return message
