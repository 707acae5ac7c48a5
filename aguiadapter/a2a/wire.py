"""A2A 1.0 JSON-RPC vocabulary shared by the client and the demo runtime.

Names follow the proto-JSON form of A2A 1.0 (``TASK_STATE_WORKING``,
``ROLE_AGENT``); iac-code's own metadata lives under ``metadata.iac_code``.
"""

from __future__ import annotations

from typing import Any, Final

A2A_VERSION: Final = "1.0"
VERSION_HEADER: Final = "A2A-Version"
IAC_CODE_KEY: Final = "iac_code"

# JSON-RPC methods (A2A 1.0 names).
SEND_MESSAGE: Final = "SendMessage"
SEND_STREAMING_MESSAGE: Final = "SendStreamingMessage"
GET_TASK: Final = "GetTask"
CANCEL_TASK: Final = "CancelTask"
SUBSCRIBE_TO_TASK: Final = "SubscribeToTask"

# Task states.
SUBMITTED: Final = "TASK_STATE_SUBMITTED"
WORKING: Final = "TASK_STATE_WORKING"
INPUT_REQUIRED: Final = "TASK_STATE_INPUT_REQUIRED"
AUTH_REQUIRED: Final = "TASK_STATE_AUTH_REQUIRED"
COMPLETED: Final = "TASK_STATE_COMPLETED"
FAILED: Final = "TASK_STATE_FAILED"
CANCELED: Final = "TASK_STATE_CANCELED"
REJECTED: Final = "TASK_STATE_REJECTED"

TERMINAL_STATES: Final = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})
# The server closes a stream after these too (there is no ``final`` flag in 1.0).
STREAM_END_STATES: Final = TERMINAL_STATES | {INPUT_REQUIRED, AUTH_REQUIRED}

ROLE_USER: Final = "ROLE_USER"
ROLE_AGENT: Final = "ROLE_AGENT"

# JSON-RPC error codes (JSON-RPC 2.0 and A2A 1.0).
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
TASK_NOT_FOUND: Final = -32001
TASK_NOT_CANCELABLE: Final = -32002
UNSUPPORTED_OPERATION: Final = -32004
VERSION_NOT_SUPPORTED: Final = -32009

ERROR_REASONS: Final = {
    PARSE_ERROR: "PARSE_ERROR",
    INVALID_REQUEST: "INVALID_REQUEST",
    METHOD_NOT_FOUND: "METHOD_NOT_FOUND",
    INVALID_PARAMS: "INVALID_PARAMS",
    INTERNAL_ERROR: "INTERNAL_ERROR",
    TASK_NOT_FOUND: "TASK_NOT_FOUND",
    TASK_NOT_CANCELABLE: "TASK_NOT_CANCELABLE",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    VERSION_NOT_SUPPORTED: "VERSION_NOT_SUPPORTED",
}


def jsonrpc_result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC 2.0 success response."""
    return {"result": result, "id": request_id, "jsonrpc": "2.0"}


def jsonrpc_error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response in the shape A2A 1.0 servers send."""
    reason = ERROR_REASONS.get(code, "UNKNOWN")
    return {
        "error": {
            "code": code,
            "message": message,
            "data": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason,
                    "domain": "a2a-protocol.org",
                    "metadata": {},
                }
            ],
        },
        "id": request_id,
        "jsonrpc": "2.0",
    }


def as_int(value: Any) -> int | None:
    """Integers arrive as floats (``12.0``) through proto Struct metadata."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
