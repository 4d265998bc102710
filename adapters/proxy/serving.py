"""Serving an ASGI application with uvicorn: in the foreground (``selfctx proxy``) or on a
background thread (tests, the benchmark), always on a socket bound before the server starts, so
that port 0 gives a free port whose number is known at once."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

__all__ = ["bind", "serve", "serve_in_thread", "stack", "tune_collector"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets of that protocol,
    # and without it a response written in two parts waits for a delayed ACK (40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(256)
    sock.set_inheritable(True)
    return sock


def tune_collector() -> None:
    """The garbage collector for a server whose long-lived state (sessions) grows while each
    request allocates much that dies with it: what was loaded at start is frozen out of the
    scans, the youngest generation is collected every 10,000 allocations instead of every 700
    (decision 0058), and the middle one every second time instead of every 20th, so that what a
    long request left there is scanned in pauses of half the length (decision 0074)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 2, 100)


def stack() -> str:
    """The HTTP parser and event loop uvicorn serves on here: ``httptools/uvloop`` when both are
    installed (the package's dependencies; uvloop has no Windows build), else what it falls back
    to (``h11``, ``asyncio``). The proxy, its workers and the benchmark's pass-through all serve
    through :func:`serve` or :func:`serve_in_thread`, so on the same stack (decision 0147)."""
    parser = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"{parser}/{loop}"


def _server(app: ASGIApp, log_level: str) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,  # the proxy logs one line per request itself, without headers
        lifespan="on",
        timeout_graceful_shutdown=5,
        # "auto": httptools and uvloop when installed, h11 and asyncio's loop otherwise; the
        # former cut the proxy's CPU a request by about 2-3 ms and the pass-through's by about 1
        # (decision 0147)
        http="auto",
        loop="auto",
    )
    return uvicorn.Server(config)


def serve(app: ASGIApp, sock: socket.socket, *, log_level: str = "warning") -> None:
    """Serve until interrupted (SIGINT/SIGTERM end it gracefully)."""
    _server(app, log_level).run(sockets=[sock])


@contextlib.contextmanager
def serve_in_thread(
    app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *, log_level: str = "warning"
) -> Iterator[str]:
    """Serve ``app`` on a background thread; yields its base URL (``http://host:port``) once it
    accepts connections, and stops it on exit."""
    sock = bind(host, port)
    server = _server(app, log_level)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
