"""A2A 1.0 side of the adapter: wire vocabulary and the JSON-RPC client.

May import: errors, fastjson, telemetry, protocol (the user message it sends).
"""

# The folder's public names are the client's (its __all__, kept in one place).
from aguiadapter.a2a.client import *  # noqa: F403
from aguiadapter.a2a.client import __all__ as __all__
