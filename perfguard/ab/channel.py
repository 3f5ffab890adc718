"""The wire between the A/B driver and its workers: a local socket with a shared key.

Messages are small dicts with a `kind`. The address and key reach a worker through its
environment, so only processes the driver started can connect.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

ENV_ADDRESS = "PERFGUARD_AB_ADDRESS"
ENV_KEY = "PERFGUARD_AB_KEY"
ENV_SIDE = "PERFGUARD_AB_SIDE"
ENV_TRACES = "PERFGUARD_TRACES"  # where every process of a session writes its Chrome traces
ENV_ITEMS = "PERFGUARD_AB_ITEMS"  # file: the node ids to run, in the driver's order

Message = dict[str, Any]


def open_listener() -> tuple[Listener, dict[str, str], Path]:
    """A listener, the environment variables a worker needs to reach it, and its folder
    (remove it once the worker has connected)."""
    key = secrets.token_bytes(32)
    folder = Path(tempfile.mkdtemp(prefix="perfguard-ab-sock-"))
    address = str(folder / "driver.sock") if os.name == "posix" else None
    listener = Listener(address, authkey=key)
    return listener, {ENV_ADDRESS: str(listener.address), ENV_KEY: key.hex()}, folder


def connect_from_env() -> Connection | None:
    """The worker's connection, or None when this process is not an A/B worker."""
    address = os.environ.get(ENV_ADDRESS)
    key = os.environ.get(ENV_KEY)
    if not address or not key:
        return None
    return Client(address, authkey=bytes.fromhex(key))
