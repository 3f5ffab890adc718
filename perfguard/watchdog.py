"""A supervisor outside the measuring process: the limit of an item (or of importing a test
module) that hangs in native code, where no signal reaches Python.

A session the user started (`pytest --perfguard`) starts one: `python -m perfguard.watchdog
PID`, reading JSON lines on its standard input. The session tells it where its results go,
each result as it is recorded, and, around each item and each module import, the deadline
(`arm`: its limit and a grace in which the session's own timer ends a hang in Python) and its
end (`disarm`). Past a deadline, the watchdog writes what the session had measured, as the
results file and the report the session would have written (the hung item or module a gap,
the items after it not measured), and then ends the session (SIGKILL: a process stuck in
native code takes no other signal); CI sees a failed step with its outputs in place. When
the session ends (its end of the pipe closes), so does the watchdog.

This module imports only the standard library until it has to write: it starts in a few
milliseconds beside every measuring session.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

GRACE_MIN_S, GRACE_MAX_S = 5.0, 60.0
IMPORT_GRACE_S = 30.0
"""The least grace of a test module's import: the session's timer waits until torch's own
import is whole (`signals.HeldImport`), and beside other work that import alone outlasted a
5-second grace (two CPU hogs on two cores: the module was ended as hung in native code)."""


def grace(limit: float, gap: str = "") -> float:
    """How long past a limit the watchdog waits for the session's own timer: a quarter of the
    limit, within 5 to 60 s; for a module's import (`gap` collection_error), 30 s at least."""
    least = IMPORT_GRACE_S if gap == "collection_error" else GRACE_MIN_S
    return min(max(limit / 4, least), max(GRACE_MAX_S, least))


class Watchdog:
    """The session's end of its watchdog."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._pipe: IO[bytes] | None = proc.stdin

    @classmethod
    def start(
        cls,
        root: Path,
        json_path: Path | None,
        report: Path | None,
        machine: str | None,
        settings: dict[str, Any],
    ) -> Watchdog | None:
        """A watchdog for this process (None where one cannot be started: the session's own
        timer then keeps the limits it can)."""
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "perfguard.watchdog", str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=None,
                start_new_session=True,  # a Ctrl-C to the session's group is not its
            )
        except OSError:
            return None
        dog = cls(proc)
        dog.send(
            "start",
            root=str(root),
            json=None if json_path is None else str(json_path),
            report=None if report is None else str(report),
            machine=machine,
            settings=settings,
        )
        return dog

    def send(self, kind: str, **fields: Any) -> None:
        if self._pipe is None:
            return
        try:
            self._pipe.write(json.dumps({"kind": kind, **fields}).encode() + b"\n")
            self._pipe.flush()
        except (OSError, ValueError):  # it is gone: the session's own timer remains
            self._pipe = None

    def arm(self, seconds: float, what: str, gap: str, remaining: list[str]) -> None:
        """From now, `what` (an item's node id, or a module being imported: `gap` is the
        gap's kind) has `seconds` and a grace; `remaining`: the items after it."""
        self.send("arm", seconds=seconds + grace(seconds, gap), limit=seconds, what=what,
                  gap=gap, remaining=remaining)  # fmt: skip

    def disarm(self) -> None:
        self.send("disarm")

    def result(self, result: dict[str, Any], environment: dict[str, Any] | None) -> None:
        """A result the session recorded: written, should the session be ended later."""
        self.send("result", result=result, environment=environment)

    def close(self) -> None:
        """The session ended: so does the watchdog."""
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                self._pipe.close()
            self._pipe = None
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


class _Reader:
    """JSON lines from the session, as they come."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream, self.buffer = stream, b""

    def messages(self, until: float | None) -> list[dict[str, Any]] | None:
        """The messages that came before `until` (None: the session's end of the pipe
        closed)."""
        wait = None if until is None else max(until - time.monotonic(), 0.0)
        ready, _, _ = select.select([self.stream], [], [], wait)
        if not ready:
            return []
        chunk = os.read(self.stream.fileno(), 1 << 16)
        if not chunk:
            return None
        *complete, self.buffer = (self.buffer + chunk).split(b"\n")
        return [json.loads(line) for line in complete if line.strip()]


def main(argv: list[str]) -> int:
    """Supervise process `argv[0]` (see the module's docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the session's Ctrl-C is the session's
    session = int(argv[0])
    start: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    armed: dict[str, Any] | None = None
    deadline: float | None = None
    reader = _Reader(sys.stdin.buffer)
    while True:
        messages = reader.messages(deadline)
        if messages is None:
            return 0  # the session ended
        for m in messages:
            kind = m.get("kind")
            if kind == "start":
                start = m
            elif kind == "result":
                results.append(m)
            elif kind == "arm":
                armed, deadline = m, time.monotonic() + float(m["seconds"])
            elif kind == "disarm":
                armed, deadline = None, None
        if deadline is not None and time.monotonic() >= deadline and armed is not None:
            try:
                _write_what_was_measured(start, results, armed)
            finally:
                os.kill(session, signal.SIGKILL)
            return 0


def _write_what_was_measured(
    start: dict[str, Any], results: list[dict[str, Any]], armed: dict[str, Any]
) -> None:
    """The results file and the report of a session ended in native code: its results so far,
    the hung item (or module) a gap, the rest not measured."""
    from perfguard.environment import machine_key
    from perfguard.files import write_json_atomic
    from perfguard.records import Gap, Run, VariantResult
    from perfguard.report.outputs import write_reports
    from perfguard.stats.thresholds import Thresholds

    what, limit = str(armed["what"]), float(armed["limit"])
    hung = (
        f"{'importing ' if armed['gap'] == 'collection_error' else ''}{what} did not return "
        f"within its limit of {limit:g} s and a grace: it hung in native code (a loop, a "
        "kernel or a collective that never returned), so the session was ended"
    )
    gaps = [Gap(kind=str(armed["gap"]), detail=hung, items=(what,))]
    remaining = [str(i) for i in armed.get("remaining") or () if i != what]
    if remaining:
        gaps.append(
            Gap(
                kind="not_measured",
                detail=f"{len(remaining)} perf item(s) never ran: the session was ended",
                items=tuple(remaining),
            )
        )
    environment: dict[str, Any] = next(
        (r["environment"] for r in reversed(results) if r.get("environment")), {}
    )
    run = Run(
        commit=_head(Path(start.get("root") or ".")),
        machine=str(
            start.get("machine") or (machine_key(environment) if environment else "unknown")
        ),
        environment=environment,
        results=tuple(VariantResult.from_json(r["result"]) for r in results),
        incomplete=tuple(gaps),
        settings=start.get("settings") or {},
    )
    if start.get("json"):
        write_json_atomic(Path(start["json"]), run.to_json())
    if start.get("report"):
        write_reports(run, Path(start["report"]), Thresholds())
    print(f"perfguard watchdog: {hung}; results written", file=sys.stderr)


def _head(root: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and len(sha) == 40 else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
