"""Every error the adapter reports, with its HTTP status and message id.

Before a stream opens an error is an HTTP JSON body
``{"error": {"code", "message"}}`` with the status below; once the stream is
open the same code travels in ``RUN_ERROR``. Messages live in the catalogs of
:mod:`aguiadapter.i18n`, keyed by the message id, so raising an error is one
line: ``raise AdapterError(ErrorCode.THREAD_BUSY)``.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(enum.Enum):
    """A documented error code: ``(HTTP status, default message id)``."""

    BAD_REQUEST = (400, "bad_request")
    UNAUTHORIZED = (401, "unauthorized")
    # Addition: a Host or Origin a web page may not use (DNS rebinding, CORS).
    FORBIDDEN = (403, "forbidden")
    # Additions to the reference's codes: admission limits (--max-active-runs*).
    TOO_MANY_RUNS = (429, "too_many_runs")
    TOO_MANY_THREADS = (429, "too_many_threads")
    SERVER_BUSY = (503, "server_busy")
    UNSUPPORTED_MEDIA_TYPE = (415, "unsupported_media_type")
    REQUEST_TOO_LARGE = (413, "request_too_large")
    INVALID_JSON = (400, "invalid_json")
    INVALID_INPUT = (400, "invalid_input")
    NOT_FOUND = (404, "not_found")
    METHOD_NOT_ALLOWED = (405, "method_not_allowed")
    URI_TOO_LONG = (414, "uri_too_long")
    HEADERS_TOO_LARGE = (431, "headers_too_large")
    DUPLICATE_RUN_ID = (409, "duplicate_run_id")
    RUN_ID_CONFLICT = (409, "run_id_conflict")
    THREAD_BUSY = (409, "thread_busy")
    THREAD_BINDING_CONFLICT = (409, "thread_binding_conflict")
    RESUME_REQUIRED = (409, "resume_required")
    INCOMPLETE_RESUME = (409, "incomplete_resume")
    UNKNOWN_INTERRUPT = (409, "unknown_interrupt")
    RESUME_PAYLOAD_INVALID = (400, "resume_payload_invalid")
    RESUME_ALREADY_APPLIED = (409, "resume_already_applied")
    EXECUTION_EXPIRED = (409, "execution_expired")
    EXECUTION_LOST = (409, "execution_lost")
    EXECUTION_NOT_FOUND = (404, "execution_not_found")
    THREAD_NOT_FOUND = (404, "thread_not_found")
    RUN_NOT_FOUND = (404, "run_not_found")
    EVENTS_TRUNCATED = (410, "events_truncated")
    SERVER_DRAINING = (503, "server_draining")
    STATE_PERSISTENCE_FAILED = (503, "state_persistence_failed")
    STATE_STORE_UNAVAILABLE = (503, "state_store_unavailable")
    A2A_UNAVAILABLE = (503, "a2a_unavailable")
    A2A_PROTOCOL_ERROR = (502, "a2a_protocol_error")
    A2A_EXECUTION_FAILED = (502, "a2a_execution_failed")
    CANCELLED = (409, "cancelled")
    INTERNAL_ERROR = (500, "internal_error")
    SERVICE_UNAVAILABLE = (503, "service_unavailable")
    # Addition: the conversation history (GET /threads/{id}/messages) cannot be
    # read from the runtime now (restarted, down, or not iac-code); with Retry-After.
    HISTORY_UNAVAILABLE = (503, "history_unavailable")

    @property
    def status(self) -> int:
        """The HTTP status used when the error is answered before the stream."""
        return int(self.value[0])

    @property
    def message_id(self) -> str:
        """The catalog id of the default message."""
        return str(self.value[1])


class AdapterError(Exception):
    """An error with a documented code; its message is rendered per caller.

    ``message_id`` picks a more specific catalog message than the code's
    default; ``params`` fill its placeholders (for example the JSON path of an
    invalid field).
    """

    def __init__(
        self, code: ErrorCode, message_id: str | None = None, **params: Any
    ) -> None:
        self.code = code
        self.message_id = message_id or code.message_id
        self.params = params
        super().__init__(f"{code.name}: {self.message_id} {params or ''}".rstrip())

    def response_headers(self) -> dict[str, str]:
        """HTTP headers the error's answer carries besides its body (none by default)."""
        return {}
