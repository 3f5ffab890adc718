"""A real S3-compatible server on 127.0.0.1 (moto's server mode), for the tests and the
object-store benchmark.

S3 applies a conditional write (If-Match) atomically; moto checks the condition and then
writes, in two steps that two request threads can interleave. So this server handles one
request at a time (requests still arrive concurrently), as S3's guarantee needs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any


def serve() -> tuple[str, Callable[[], None]]:
    """Start the server; its endpoint URL, and how to stop it."""
    from moto.moto_server import werkzeug_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    app = werkzeug_app.DomainDispatcherApplication(werkzeug_app.create_backend_app)
    lock = threading.Lock()

    def one_at_a_time(environ: Any, start_response: Any) -> Any:
        with lock:
            return list(app(environ, start_response))

    server = make_server(
        "127.0.0.1",
        0,
        one_at_a_time,
        threaded=True,
        request_handler=werkzeug_app.MotoRequestHandler,
    )
    # (shutdown waits for the loop's next poll: half a second by default)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()

    def stop() -> None:
        server.shutdown()
        thread.join()

    return f"http://127.0.0.1:{server.port}", stop
