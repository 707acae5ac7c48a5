"""A2A 1.0 side of the adapter: wire vocabulary and the JSON-RPC client.

May import: errors, fastjson, telemetry, protocol (the user message it sends).
"""

from aguiadapter.a2a.client import (
    A2AClient,
    A2AError,
    A2AHttpError,
    A2ARpcError,
    A2AUnavailable,
    iter_sse_data,
)

__all__ = [
    "A2AClient",
    "A2AError",
    "A2AHttpError",
    "A2ARpcError",
    "A2AUnavailable",
    "iter_sse_data",
]
