"""AG-UI protocol server in front of an A2A 1.0 agent runtime.

``create_app(Config(...))`` returns an ``aiohttp.web.Application`` that can run
on its own or be mounted in another application with ``add_subapp``. Serve it
(or the application it is mounted in) with ``AdapterRunner``, a drop-in
``aiohttp.web.AppRunner``, to have even the HTTP parser's refusals answered
as JSON.
"""

from .version import __version__

__all__ = ["AdapterRunner", "Config", "__version__", "create_app"]


def __getattr__(name: str) -> object:
    # Lazy, so that `python -m aguiadapter diagram` and the pure layers do not
    # pay for importing the web stack.
    if name == "create_app":
        from .web.app import create_app

        return create_app
    if name == "AdapterRunner":
        from .web.server import AdapterRunner

        return AdapterRunner
    if name == "Config":
        from .config import Config

        return Config
    raise AttributeError(name)
