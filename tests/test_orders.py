"""A child session's orders: one environment variable, read once, refused when it does not read."""

from __future__ import annotations

import json

import pytest

from perfguard.orders import (
    ENV,
    Orders,
    OrdersError,
    child_environment,
    from_environment,
)


def test_orders_travel_through_the_environment_unchanged() -> None:
    orders = Orders(side="A", address="@x", key="ab", sites=True, instructions=("forward",))
    assert from_environment(orders.env()) == orders
    assert from_environment(orders.env()).worker
    # what is empty is not written: a user's session's orders are no variable at all
    assert json.loads(Orders(side="B").env()[ENV]) == {"side": "B"}
    assert from_environment({}) == Orders() and not Orders().worker


def test_a_child_environment_replaces_the_parents_orders_and_keeps_the_rest() -> None:
    parent = {"PATH": "/bin", **Orders(side="A", sites=True).env()}
    env = child_environment(Orders(compile_cache="load"), parent)
    assert env["PATH"] == "/bin"
    assert from_environment(env) == Orders(compile_cache="load")


@pytest.mark.parametrize(
    ("text", "says"),
    [("not json", "is not JSON"), ("[1]", "must be an object"), ('{"colour": 1}', "unknown")],
)
def test_orders_that_do_not_read_are_refused_by_name(text: str, says: str) -> None:
    with pytest.raises(OrdersError, match=says):
        from_environment({ENV: text})


def test_a_session_with_unreadable_orders_stops_with_one_message(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    monkeypatch.setenv(ENV, '{"colour": 1}')
    result = pytester.runpytest_subprocess("--perfguard", "--perfguard-compare=none")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*PERFGUARD_ORDERS has unknown orders*"])
