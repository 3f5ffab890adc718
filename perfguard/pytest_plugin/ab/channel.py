"""The wire between the A/B driver and its workers: a local socket with a shared key.

The messages are declared in `perfguard.pytest_plugin.ab.protocol` (plain dicts with a `kind` on the
wire). The address and key reach a worker through its environment, so only processes the
driver started can connect.
"""

from __future__ import annotations

import os
import secrets
import sys
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path

from perfguard import scratch

ENV_ADDRESS = "PERFGUARD_AB_ADDRESS"
ENV_KEY = "PERFGUARD_AB_KEY"
ENV_SIDE = "PERFGUARD_AB_SIDE"
ENV_TRACES = "PERFGUARD_TRACES"  # where every process of a session writes its Chrome traces
ENV_ITEMS = "PERFGUARD_AB_ITEMS"  # file: the node ids to run, in the driver's order
ENV_REACH = "PERFGUARD_AB_REACH"  # file: where a worker writes what each test ran (its record)


SOCKET_PATH_MAX = 103
"""The longest socket path every POSIX system binds (macOS 104 bytes, Linux 108, with the
terminating NUL)."""

ABSTRACT = "@"
"""How an abstract socket's address (a leading NUL, which no environment variable holds) is
written in the worker's environment."""


def _address(folder: Path) -> str | None:
    """The socket's address: a file in `folder`; in Linux's abstract namespace when that
    path is too long to bind (a deep TMPDIR), where the key alone keeps others out."""
    if os.name != "posix":
        return None  # the platform's default family
    path = str(folder / "driver.sock")
    if len(os.fsencode(path)) <= SOCKET_PATH_MAX or not sys.platform.startswith("linux"):
        return path  # (elsewhere a too-long path fails with the system's own message)
    return f"\0perfguard-ab-{secrets.token_hex(8)}"


def open_listener() -> tuple[Listener, dict[str, str], Path]:
    """A listener, the environment variables a worker needs to reach it, and its folder
    (remove it once the worker has connected)."""
    key = secrets.token_bytes(32)
    folder = scratch.make(f"{scratch.PREFIX}sock-")
    listener = Listener(_address(folder), authkey=key)
    address = listener.address  # an abstract one as bytes
    if isinstance(address, bytes):
        address = ABSTRACT + address[1:].decode()
    return listener, {ENV_ADDRESS: str(address), ENV_KEY: key.hex()}, folder


def connect_from_env() -> Connection | None:
    """The worker's connection, or None when this process is not an A/B worker."""
    address = os.environ.get(ENV_ADDRESS)
    key = os.environ.get(ENV_KEY)
    if not address or not key:
        return None
    if address.startswith(ABSTRACT):
        address = "\0" + address[len(ABSTRACT) :]
    return Client(address, authkey=bytes.fromhex(key))
