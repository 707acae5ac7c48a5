"""Mount the AG-UI adapter inside an existing aiohttp application.

Run:  python examples/embed_in_aiohttp.py          (the scripted demo agent; or --a2a-url URL, --port N)
Then: curl -N -X POST http://127.0.0.1:8080/agui/ -H 'Content-Type: application/json' \\
        -H 'Authorization: Bearer demo-token' -d @examples/run.json

The parent app keeps its own routes and middlewares and its own (large)
upload limit; the adapter still refuses AG-UI bodies over 12 MiB, because it
enforces its limits per request, not through the parent's client_max_size.
Every error under /agui/ is the adapter's JSON; serving the parent with
AdapterRunner (instead of web.run_app or web.AppRunner) also makes the HTTP
parser's refusals (an oversize header or URL) JSON, for every route.

SIGTERM and SIGINT stop it as they stop ``python -m aguiadapter``: the
runner's cleanup shuts the adapter down, which ends every open stream with
``RUN_ERROR CANCELLED`` (and cancels its runtime task) before the process
exits, instead of cutting the streams mid-message.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import tempfile
from pathlib import Path

from aiohttp import web

from aguiadapter import AdapterRunner, Config, create_app


async def index(request: web.Request) -> web.Response:
    return web.Response(text="the host application\n")


def build_parent(state_dir: Path, *, a2a_url: str | None = None, token: str | None = "demo-token") -> web.Application:
    """A host app with its own route, and the adapter under ``/agui/``."""
    parent = web.Application(client_max_size=256 * 1024 * 1024)
    parent.router.add_get("/", index)
    adapter = create_app(Config(state_dir=state_dir, a2a_url=a2a_url, demo=a2a_url is None, auth_token=token))
    parent.add_subapp("/agui/", adapter)
    return parent


async def serve(host: str = "127.0.0.1", port: int = 8080, a2a_url: str | None = None) -> None:
    """Serve the host app until SIGTERM or SIGINT."""
    runner = AdapterRunner(build_parent(Path(tempfile.mkdtemp(prefix="agui-state-")), a2a_url=a2a_url))
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        for bound in runner.addresses:
            print(f"serving on http://{bound[0]}:{bound[1]}/ (the adapter under /agui/)", flush=True)
        await stop.wait()
    finally:
        # The adapter's on_shutdown ends its open streams with RUN_ERROR first.
        await runner.cleanup()


if __name__ == "__main__":
    options = argparse.ArgumentParser(description="the adapter mounted in a host aiohttp app")
    options.add_argument("--port", type=int, default=8080)
    options.add_argument("--a2a-url", default=None, help="the A2A runtime (default: the scripted demo agent)")
    args = options.parse_args()
    asyncio.run(serve(port=args.port, a2a_url=args.a2a_url))
