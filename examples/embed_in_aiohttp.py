"""Mount the AG-UI adapter inside an existing aiohttp application.

Run:  python examples/embed_in_aiohttp.py
Then: curl -N -X POST http://127.0.0.1:8080/agui/ -H 'Content-Type: application/json' \\
        -H 'Authorization: Bearer demo-token' -d @examples/run.json

The parent app keeps its own routes and middlewares and its own (large)
upload limit; the adapter still refuses AG-UI bodies over 12 MiB, because it
enforces its limits per request, not through the parent's client_max_size.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from aiohttp import web

from aguiadapter import Config, create_app


async def index(request: web.Request) -> web.Response:
    return web.Response(text="the host application\n")


def build_parent(state_dir: Path, *, a2a_url: str | None = None, token: str | None = "demo-token") -> web.Application:
    """A host app with its own route, and the adapter under ``/agui/``."""
    parent = web.Application(client_max_size=256 * 1024 * 1024)
    parent.router.add_get("/", index)
    adapter = create_app(Config(state_dir=state_dir, a2a_url=a2a_url, auth_token=token))
    parent.add_subapp("/agui/", adapter)
    return parent


if __name__ == "__main__":
    web.run_app(build_parent(Path(tempfile.mkdtemp(prefix="agui-state-"))), host="127.0.0.1", port=8080)
