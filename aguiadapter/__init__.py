"""AG-UI protocol server in front of an A2A 1.0 agent runtime.

``create_app(Config(...))`` returns an ``aiohttp.web.Application`` that can run
on its own or be mounted in another application with ``add_subapp``. Serve it
(or the application it is mounted in) with ``AdapterRunner``, a drop-in
``aiohttp.web.AppRunner``, to have even the HTTP parser's refusals answered
as JSON.
"""

from typing import TYPE_CHECKING

from .version import __version__

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from .config import Config, JwtSettings
    from .store.contract import ThreadStore
    from .store.factory import open_store
    from .web.app import create_app, create_metrics_app
    from .web.auth import PRINCIPAL_KEY, PrincipalHook, Unauthorized, principal_from_request_key
    from .web.server import AdapterRunner

__all__ = [
    "PRINCIPAL_KEY",
    "AdapterRunner",
    "Config",
    "JwtSettings",
    "PrincipalHook",
    "ThreadStore",
    "Unauthorized",
    "__version__",
    "create_app",
    "create_metrics_app",
    "open_store",
    "principal_from_request_key",
]

#: Public name -> the module that defines it (imported on first use).
_WHERE = {
    "create_app": ".web.app",
    "create_metrics_app": ".web.app",
    "AdapterRunner": ".web.server",
    "Config": ".config",
    "JwtSettings": ".config",
    "PRINCIPAL_KEY": ".web.auth",
    "PrincipalHook": ".web.auth",
    "Unauthorized": ".web.auth",
    "principal_from_request_key": ".web.auth",
    # create_app(config, store=...): the store an app keeps its threads in.
    "ThreadStore": ".store.contract",
    "open_store": ".store.factory",
}


def __getattr__(name: str) -> object:
    # Lazy, so that `python -m aguiadapter diagram` and the pure layers do not
    # pay for importing the web stack.
    if name not in _WHERE:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(_WHERE[name], __name__), name)
