"""Mount the AG-UI adapter inside an existing aiohttp application.

Run:  python examples/embed_in_aiohttp.py
Then: curl -N -X POST http://127.0.0.1:8080/agui/ -H 'Content-Type: application/json' \\
        -H 'Authorization: Bearer demo-token' -d @examples/run.json

The parent app keeps its own routes and middlewares and its own (large)
upload limit; the adapter still refuses AG-UI bodies over 12 MiB, because it
enforces its limits per request, not through the parent's client_max_size.
Every error under /agui/ is the adapter's JSON; serving the parent with
AdapterRunner (instead of web.run_app or web.AppRunner) also makes the HTTP
parser's refusals (an oversize header or URL) JSON, for every route.
"""

from __future__ import annotations

import asyncio
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


async def serve(host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve the host app until interrupted."""
    runner = AdapterRunner(build_parent(Path(tempfile.mkdtemp(prefix="agui-state-"))))
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        print(f"serving on http://{host}:{port}/ (the adapter under /agui/)", flush=True)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
