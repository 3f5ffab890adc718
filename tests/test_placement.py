"""The measuring thread's CPU in same-job A/B: pinned for a block, everything given back."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import pytest

from perfguard.measure.placement import on_one_cpu

linux_smp = pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or not hasattr(os, "sched_getaffinity")
    or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux thread affinity and at least two CPUs",
)


@linux_smp
def test_the_block_runs_on_the_lowest_allowed_cpu_and_the_rest_is_given_back() -> None:
    allowed = os.sched_getaffinity(0)
    with on_one_cpu() as cpu:
        assert cpu == min(allowed)
        assert os.sched_getaffinity(0) == {cpu}
    assert os.sched_getaffinity(0) == allowed


@linux_smp
def test_the_other_threads_leave_the_cpu_for_the_block_and_get_theirs_back() -> None:
    """The operators' pool must not share the caller's CPU (on a busy host the scheduler
    pulls it there); afterwards each thread has the CPUs it had."""
    allowed = os.sched_getaffinity(0)
    inside, check, checked, done = (threading.Event() for _ in range(4))
    seen: list[set[int]] = []

    def older() -> None:
        inside.set()
        check.wait(10)
        seen.append(os.sched_getaffinity(0))
        checked.set()
        done.wait(10)
        seen.append(os.sched_getaffinity(0))

    thread = threading.Thread(target=older)
    thread.start()
    inside.wait(10)
    with on_one_cpu() as cpu:
        check.set()
        checked.wait(10)
    done.set()
    thread.join(10)
    assert seen == [allowed - {cpu}, allowed]


@linux_smp
def test_a_thread_started_inside_gets_every_cpu_back() -> None:
    """A thread pool made during the block inherits the one CPU; it must not keep it."""
    allowed = os.sched_getaffinity(0)
    started, leave = threading.Event(), threading.Event()
    tid: list[int] = []

    def pool_thread() -> None:
        tid.append(threading.get_native_id())
        started.set()
        leave.wait(10)

    with on_one_cpu() as cpu:
        thread = threading.Thread(target=pool_thread)
        thread.start()
        started.wait(10)
        assert os.sched_getaffinity(tid[0]) == {cpu}
    try:
        assert os.sched_getaffinity(tid[0]) == allowed
    finally:
        leave.set()
        thread.join(10)


def test_nothing_is_pinned_with_one_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda *a: calls.append(a), raising=False)
    with on_one_cpu() as cpu:
        assert cpu is None
    assert calls == []


def test_a_refusal_to_pin_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", refuse, raising=False)
    with on_one_cpu() as cpu:
        assert cpu is None


def test_a_same_job_worker_times_every_block_on_the_shared_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import contextlib
    from multiprocessing import Pipe

    from perfguard.pytest_plugin.ab import worker

    pinned: list[str] = []

    @contextlib.contextmanager
    def recording_cpu() -> Any:
        pinned.append("in")
        yield None
        pinned.append("out")

    def one_block(call: Any, clock: Any, *args: Any, around_block: Any, **_: Any) -> None:
        with around_block():
            call()

    monkeypatch.setattr(worker, "on_one_cpu", recording_cpu)
    monkeypatch.setattr(worker, "sample_on_demand", one_block)
    here, there = Pipe()
    try:
        calls: list[int] = []
        sampler: Any = worker.WorkerLink(here, "head", []).sampler()
        sampler(lambda: calls.append(1), None)
        assert pinned == ["in", "out"] and calls == [1]
    finally:
        here.close()
        there.close()
