"""AG-UI protocol server in front of an A2A 1.0 agent runtime.

``create_app(Config(...))`` returns an ``aiohttp.web.Application`` that can run
on its own or be mounted in another application with ``add_subapp``.
"""

from .version import __version__

__all__ = ["Config", "__version__", "create_app"]


def __getattr__(name: str) -> object:
    # Lazy, so that `python -m aguiadapter diagram` and the pure layers do not
    # pay for importing the web stack.
    if name == "create_app":
        from .web.app import create_app

        return create_app
    if name == "Config":
        from .config import Config

        return Config
    raise AttributeError(name)
