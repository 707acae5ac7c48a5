"""A chat page in the browser, talking AG-UI to the adapter with @ag-ui/client.

Run:  python examples/browser/serve.py            (then open http://127.0.0.1:8080/)
      python examples/browser/serve.py --a2a-url http://127.0.0.1:9000/   (a real runtime)

One aiohttp application serves the page (``index.html`` and ``static/``) and
mounts the adapter under ``/agui/`` with ``create_app``; without ``--a2a-url``
the adapter starts its embedded demo runtime, so this works offline with
nothing else running. The page loads ``static/agui-client.js``, a committed
browser bundle of ``@ag-ui/client`` 1.0.0 (rebuild it with
``npm ci --prefix tests/interop && node tests/interop/build-browser.mjs``),
and ``@aguiadapter/client`` from the repository's ``clients/js/src`` as is
(under ``/client/``), both named by the import map in ``index.html``.

Try ``hello``, ``think``, ``tool``, ``permission notes.txt`` (Approve / Deny)
and ``question``; reload the page while an approval waits, or drop the
connection during ``slow 10``: the page picks the thread and the answer up.
"""

from __future__ import annotations

import argparse
import mimetypes
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

from aguiadapter.config import Config
from aguiadapter.web.app import create_app

# The client package's files are ES modules: browsers load them only as JavaScript.
mimetypes.add_type("text/javascript", ".mjs")

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
#: @aguiadapter/client (clients/js), served as is under /client/ (the page's import map names it).
CLIENT = HERE.parent.parent / "clients" / "js" / "src"
NO_CACHE = {"Cache-Control": "no-cache"}


def build_app(
    *,
    state_dir: Path,
    workspace: Path,
    a2a_url: str | None = None,
    a2a_token: str | None = None,
    disconnect_grace_seconds: float = 30.0,
) -> web.Application:
    """The page, its settings and the adapter under ``/agui/``.

    The page sends ``workspace`` as ``forwardedProps.iacCode.cwd``; it is also
    the only workspace the adapter accepts. A run whose connection drops goes
    on for ``disconnect_grace_seconds`` (the page re-attaches to it).
    """
    workspace = workspace.resolve()
    app = web.Application()
    add_page(app, workspace)
    adapter = create_app(
        Config(
            state_dir=state_dir, a2a_url=a2a_url, a2a_token=a2a_token, demo=a2a_url is None,
            allowed_cwds=(str(workspace),),
            disconnect_grace_seconds=disconnect_grace_seconds,
        )
    )
    app.add_subapp("/agui/", adapter)
    return app


def add_page(app: web.Application, workspace: Path) -> None:
    """The page, its scripts and its settings (``/config.json``: the adapter
    at ``/agui/``, and the workspace it sends) on ``app``; what answers under
    ``/agui/`` is the caller's (the adapter here, a load balancer in front of
    replicas in tests/interop/test_rolling_restart.py)."""
    settings: dict[str, Any] = {"aguiUrl": "/agui/", "cwd": str(workspace)}

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(HERE / "index.html", headers=NO_CACHE)

    async def page_config(request: web.Request) -> web.Response:
        return web.json_response(settings, headers=NO_CACHE)

    app.router.add_get("/", index)
    app.router.add_get("/config.json", page_config)
    app.router.add_static("/static/", STATIC, show_index=False, append_version=False)
    app.router.add_static("/client/", CLIENT, show_index=False, append_version=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="where to listen (default: loopback only)")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--a2a-url", default=None, help="A2A runtime (default: the embedded demo runtime)")
    parser.add_argument("--a2a-token", default=None)
    parser.add_argument("--state-dir", type=Path, default=None, help="thread state (default: a new temporary folder)")
    parser.add_argument(
        "--workspace", type=Path, default=None, help="the cwd the page sends (default: a new temporary folder)"
    )
    parser.add_argument(
        "--disconnect-grace-seconds", type=float, default=30.0,
        help="how long a run whose connection dropped waits for the page to re-attach (default 30; 0: cancel it)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="agui-browser-state-"))
    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="agui-browser-workspace-"))
    workspace.mkdir(parents=True, exist_ok=True)
    app = build_app(
        state_dir=state_dir, workspace=workspace, a2a_url=args.a2a_url, a2a_token=args.a2a_token,
        disconnect_grace_seconds=args.disconnect_grace_seconds,
    )
    print(f"  workspace: {workspace}\n  state:     {state_dir}", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=_printer(args.host), shutdown_timeout=1.0)


def _printer(host: str) -> Any:
    def show(text: str) -> None:
        # aiohttp prints "======== Running on http://127.0.0.1:PORT ========"; keep it one plain line.
        for line in text.splitlines():
            if "Running on" in line:
                url = line.split("Running on", 1)[1].strip(" =").split(" ")[0]
                print(f"browser example on {url.rstrip('/')}/", flush=True)
            elif line.strip():
                print(line, flush=True)

    return show


if __name__ == "__main__":
    main()
