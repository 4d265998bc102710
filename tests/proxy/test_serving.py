"""The stack the proxy and the benchmark's pass-through are served on (decision 0147)."""

from __future__ import annotations

import asyncio
import sys

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from selfctx.adapters.proxy.passthrough import PassThrough
from selfctx.adapters.proxy.serving import serve_in_thread, stack


async def _where(request: Request) -> JSONResponse:
    body = await request.body()
    loop = type(asyncio.get_running_loop())
    return JSONResponse({"loop": f"{loop.__module__}.{loop.__qualname__}", "bytes": len(body)})


def _upstream() -> Starlette:
    return Starlette(routes=[Route("/{path:path}", _where, methods=["GET", "POST"])])


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop has no Windows build")
def test_the_proxy_and_the_pass_through_serve_on_httptools_and_uvloop() -> None:
    assert stack() == "httptools/uvloop"
    body = b'{"messages": [' + b",".join([b'{"role": "user", "content": "x"}'] * 2000) + b"]}"
    with serve_in_thread(_upstream()) as upstream, serve_in_thread(PassThrough(upstream).app) as pt:
        direct = httpx.post(upstream + "/v1/x", content=body, timeout=30)
        through = httpx.post(pt + "/v1/x", content=body, timeout=30)
    # the server's own loop, and the pass-through forwards the whole body on it
    assert direct.json() == {"loop": "uvloop.Loop", "bytes": len(body)}
    assert through.json() == direct.json()
