"""AdapterRunner serves through aiohttp's public runner API: the connection
options it is given reach each connection, and its connections are the app
server's own (cleanup closes them)."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from aguiadapter import AdapterRunner
from tests.support.serve import on_loopback, port_of


async def hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")


async def test_connection_options_given_to_the_runner_reach_each_connection() -> None:
    app = web.Application()
    app.router.add_get("/{tail:.*}", hello)
    runner = await on_loopback(AdapterRunner(app, max_line_size=200, shutdown_timeout=0.5))
    base = f"http://127.0.0.1:{port_of(runner)}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/short") as resp:
                assert (resp.status, await resp.text()) == (200, "hello")
            async with session.get(f"{base}/{'a' * 400}") as resp:
                assert resp.status == 414
                assert (await resp.json())["error"]["code"] == "URI_TOO_LONG"
    finally:
        await runner.cleanup()


async def test_cleanup_closes_the_connections_the_runner_made() -> None:
    app = web.Application()
    app.router.add_get("/", hello)
    runner = await on_loopback(AdapterRunner(app, shutdown_timeout=0.5))
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(runner))
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        assert b"hello" in await reader.readuntil(b"hello")
        # The connection is kept alive; the runner's cleanup closes it.
        await asyncio.wait_for(runner.cleanup(), 5)
        assert await asyncio.wait_for(reader.read(), 5) == b""
    finally:
        writer.close()
