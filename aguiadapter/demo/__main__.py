"""Run the demo A2A runtime on its own.

python -m aguiadapter.demo --host 127.0.0.1 --port 9100 [--token T]
"""

from __future__ import annotations

import argparse
import logging

from aiohttp import web

from aguiadapter.demo.runtime import create_demo_app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line options."""
    parser = argparse.ArgumentParser(
        prog="python -m aguiadapter.demo",
        description="Serve the scripted demo agent as an A2A 1.0 JSON-RPC server.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=9100, help="port to listen on")
    parser.add_argument("--token", default=None, help="require 'Authorization: Bearer TOKEN'")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Serve until interrupted."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_demo_app(token=args.token)
    print(f"demo A2A runtime on http://{args.host}:{args.port}/", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
