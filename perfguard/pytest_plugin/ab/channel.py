"""The wire between the A/B driver and its workers: a local socket with a shared key.

A worker connects to a `Launch` (accepted in a thread from the start). The messages are
declared in `perfguard.pytest_plugin.ab.protocol` (plain dicts with a `kind` on the wire).
The address and key reach a worker in its orders (`perfguard.orders`), so only processes the
driver started can connect.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import threading
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path

from perfguard import scratch

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


def open_listener() -> tuple[Listener, tuple[str, str], Path]:
    """A listener, what a worker needs to reach it (the address and the key, in hex: its
    orders), and its folder (remove it once the worker has connected)."""
    key = secrets.token_bytes(32)
    folder = scratch.make(f"{scratch.PREFIX}sock-")
    listener = Listener(_address(folder), authkey=key)
    address = listener.address  # an abstract one as bytes
    if isinstance(address, bytes):
        address = ABSTRACT + address[1:].decode()
    return listener, (str(address), key.hex()), folder


def connect(address: str | None, key: str | None) -> Connection | None:
    """The worker's connection to its driver (its orders' address and key), or None when
    this process is not an A/B worker."""
    if not address or not key:
        return None
    if address.startswith(ABSTRACT):
        address = "\0" + address[len(ABSTRACT) :]
    return Client(address, authkey=bytes.fromhex(key))


class Launch:
    """A launched worker's connection, accepted in a thread from the start: a worker's first
    step, in its `pytest_configure`, is to connect, and it waits there until it is accepted,
    so accepting at once lets it collect while the driver gets ready."""

    def __init__(self, listener: Listener, folder: Path, *, items_later: bool = False) -> None:
        self.listener, self.folder = listener, folder
        # launched before the driver had collected: the worker waits for the items
        self.items_later = items_later
        self.conn: Connection | None = None
        self._thread = threading.Thread(
            target=self._accept, name="perfguard-ab-accept", daemon=True
        )
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError, EOFError, AuthenticationError):
            self.conn = self.listener.accept()

    def wait(self, seconds: float) -> Connection | None:
        """The connection once the worker made it, or None after `seconds`."""
        self._thread.join(seconds)
        return self.conn

    def close(self) -> None:
        """Stop listening (the connection, if made, is the caller's) and remove the socket."""
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)
