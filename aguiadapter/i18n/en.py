"""English messages, the fallback catalog: every message id is defined here."""

from __future__ import annotations

MESSAGES: dict[str, str] = {
    # Default messages of the error codes (aguiadapter.errors.ErrorCode).
    "bad_request": "The request is not valid HTTP.",
    "bad_request_body": "The request body cannot be read: its Content-Encoding or chunked encoding is broken.",
    "unauthorized": "Missing or invalid bearer token.",
    "unauthorized_token_expired": "The bearer token has expired; get a new one.",
    "forbidden": "This request is not allowed from where it comes.",
    "forbidden_host": (
        "This server accepts only loopback host names here (localhost, 127.0.0.1, [::1]);"
        " add another name with --allowed-host."
    ),
    "forbidden_origin": "Web pages from this origin may not call this server; list it with --allowed-origin.",
    "too_many_runs": "You already have as many active runs as allowed; try again when one of them has ended.",
    "too_many_threads": "You have started as many new threads as allowed for now; try again after Retry-After seconds.",
    "too_many_reattaches": (
        "You already have as many re-attached streams open as allowed; close one, or try again later."
    ),
    "server_busy": "The server is running as many runs as it allows; try again shortly.",
    "server_busy_bodies": "The server is reading as many request bodies as it holds at once; try again shortly.",
    "body_too_slow": (
        "The request body arrived too slowly (it must arrive within 10 seconds, or at 64 KiB per second on"
        " average); send it again."
    ),
    "unsupported_media_type": "The request body must be sent as application/json.",
    "request_too_large": "The request body is too large.",
    "invalid_json": "The request body is not valid JSON.",
    "invalid_json_unicode": "The request body contains text that is not valid Unicode (an unpaired surrogate escape).",
    "invalid_json_number": (
        "The request body is not valid JSON: NaN, Infinity and numbers beyond the range of a double are not JSON."
    ),
    "invalid_json_encoding": "The request body must be JSON encoded in UTF-8.",
    "invalid_input": "Invalid AG-UI RunAgentInput envelope.",
    "not_found": "Not found.",
    "method_not_allowed": "This method is not allowed here; the Allow header lists the methods that are.",
    "uri_too_long": "The request URL is too long.",
    "headers_too_large": "The request headers are too large.",
    "duplicate_run_id": "This run ID has already been used for the same request.",
    "run_id_conflict": "This run ID has already been used for a different request on this thread.",
    "run_id_conflict_resume": (
        "This resume reuses the run ID of the interrupted run it answers. A resume is a new run:"
        " send it with a new runId (same threadId, same rosInvocationId). CopilotKit up to 1.74"
        " reuses the run ID; add the resume middleware from the adapter's CopilotKit guide"
        " (docs/front-ends.md) to its runtime."
    ),
    "thread_busy": "Another run is already active on this thread.",
    "thread_binding_conflict": "This thread is bound to a different working directory or user.",
    "resume_required": (
        "This thread is waiting for an answer to a pending interrupt; send a resume."
    ),
    "incomplete_resume": "The resume must answer every pending interrupt exactly once.",
    "unknown_interrupt": (
        "The resume refers to an interrupt that is not pending (this thread waits for no answer now: "
        "GET /threads/{{threadId}} shows what it waits for)."
    ),
    "resume_payload_invalid": (
        "The resume payload is missing or does not match the interrupt's response schema."
    ),
    "resume_already_applied": "This interrupt response has already been applied.",
    "execution_expired": "The interrupt has expired.",
    "execution_lost": "The execution can no longer be recovered.",
    "execution_not_found": "Execution not found.",
    "invalid_event_cursor": "Last-Event-ID (or ?after=) must be an event id of this run.",
    "thread_not_found": "Thread not found.",
    "run_not_found": "This run is unknown, or its events are no longer kept (past the replay retention).",
    "events_truncated": "The events after this cursor are no longer all kept; read the thread's status instead.",
    "server_draining": "This server is shutting down; retry on another replica.",
    "state_persistence_failed": "The adapter could not save its recovery state reliably.",
    "state_store_unavailable": "The thread state store is unavailable; try again shortly.",
    "a2a_unavailable": "The agent runtime is unavailable.",
    "a2a_unauthorized": "The agent runtime refused this server's credentials; an operator must fix its token.",
    "a2a_protocol_error": "The agent runtime returned an inconsistent response.",
    "a2a_execution_failed": "The agent run failed.",
    "cancelled": "The execution was cancelled.",
    "internal_error": "Internal error.",
    "service_unavailable": "The server is starting or shutting down; try again shortly.",
    # The request envelope.
    "input_not_object": "The request body must be a JSON object.",
    "input_field_missing": "Required field {path} is missing.",
    "input_unknown_field": "Unknown field {path}.",
    "input_expected_string": "{path} must be a string.",
    "input_expected_integer": "{path} must be an integer.",
    "input_expected_boolean": "{path} must be true or false.",
    "input_expected_object": "{path} must be a JSON object.",
    "input_expected_array": "{path} must be an array.",
    "input_expected_string_or_array": "{path} must be a string or an array.",
    "input_string_empty": "{path} must not be empty.",
    "input_string_too_long": "{path} must be at most {max_length} characters long.",
    "input_integer_not_positive": "{path} must be a positive integer.",
    "input_bad_value": "{path} must be one of: {allowed}.",
    "input_invalid_value": "{path} is not valid.",
    "input_credential_not_ascii": (
        "{path} must be printable ASCII (no other characters, no control characters): it travels in HTTP headers."
    ),
    "input_credential_too_long": (
        "{path} is longer than {max_length} characters: a credential travels in an HTTP header, "
        "which takes a few KiB at most."
    ),
    "input_region_id_invalid": (
        "{path} must be a region ID such as cn-hangzhou: lower-case letters, digits and hyphens, at most 63."
    ),
    "input_tools_unsupported": "{path}: client-side tools are not supported; send an empty list.",
    "input_user_message_required": "A new run needs a user message in {path}.",
    "input_user_id_not_principal": "{path} must be left out or equal to the authenticated user.",
    # Raised by the thread service (no path): the latest user message is missing or was
    # already sent on an earlier run.
    "new_run_requires_user_message": "A new run needs a new user message in messages.",
    # The content of a user message.
    "input_user_content_empty": "{path} is empty: a user message needs text or an image.",
    "input_user_content_type": "{path} must be a string or a list of content parts.",
    "input_user_content_unusable": (
        "{path} has nothing this server can use (it would skip: {skipped}); send text or an inline PNG, JPEG, "
        "GIF or WebP image."
    ),
    "input_content_part_unsupported": (
        "{path}: {value} content is not supported; send text or inline images."
    ),
    "input_image_source_unsupported": (
        "{path}: images must be sent inline as base64 data; {value} sources are not accepted."
    ),
    "input_image_type_unsupported": (
        "{path}: image type {mime_type} is not supported; use PNG, JPEG, GIF or WebP."
    ),
    "input_image_bad_base64": "{path} is not valid base64.",
    "input_image_content_mismatch": "{path} does not contain a valid {mime_type} image.",
    "input_image_damaged": "{path} is not a whole {mime_type} image: it is cut short or damaged.",
    "input_image_unreadable": "{path} is not a {mime_type} image that can be read.",
    "input_image_too_many_pixels": "{path}: the image has more than {limit_mpx} million pixels.",
    "input_image_too_large": "{path}: the image is larger than {limit_mib} MiB once decoded.",
    "input_images_total_too_large": (
        "{path}: the images of one message must not exceed {limit_mib} MiB in total."
    ),
    # The working directory.
    "input_cwd_not_absolute": "{path} must be an absolute path without '..' segments.",
    "input_cwd_outside_roots": "{path} is outside the allowed workspace directories.",
    "input_cwd_not_directory": "{path} exists but is not a directory.",
    "input_cwd_below_file": "{path} lies below a file: one of its parents is not a directory.",
    "input_cwd_symlink_loop": "{path} cannot be resolved: its symbolic links form a loop.",
    "input_cwd_too_long": "{path} is longer than {limit} bytes (UTF-8).",
    "input_cwd_name_too_long": "{path} has a component longer than {limit} bytes (UTF-8).",
    "input_cwd_inaccessible": "{path} cannot be looked into by the server (permission denied).",
    # Resume (raised by the resume checks and the thread service).
    "session_lost": "The runtime no longer has this conversation's session; it cannot be resumed.",
    "resume_duplicate_ids": "The resume answers the same interrupt more than once.",
    "resume_payload_missing": "The answer to interrupt {id} needs a payload.",
    "resume_payload_schema": "The answer to interrupt {id} does not match its responseSchema.",
    "unknown_interrupt_pending": (
        "The resume answers interrupt {id}, which is not pending; the pending interrupt ids are: {pending}."
    ),
    "resume_payload_allowed": "The answer to interrupt {id}: {field} must be one of: {allowed}.",
    "resume_payload_required": "The answer to interrupt {id} needs {field}.",
    "resume_payload_unknown_field": (
        "The answer to interrupt {id}: {field} has a field its responseSchema does not define (it takes: {allowed})."
    ),
    "resume_payload_type": "The answer to interrupt {id}: {field} must be of type {type}.",
    "resume_payload_field": "The answer to interrupt {id}: {field} does not match its responseSchema.",
    "resume_identity_mismatch": "The resume does not match the interrupted execution (rosInvocationId).",
    # POST /connect (the hydrate run of a reloaded page).
    "connect_resume_refused": "{path}: a connect answers no interrupt; send the answers to POST / as a resume.",
    "connect_history_unavailable": (
        "The conversation cannot be read from the agent runtime right now; the thread itself is intact, and what"
        " it waits for is restored. Try again later to see the messages."
    ),
    "connect_history_gone": (
        "The agent runtime no longer holds this conversation (it restarted); the thread itself is intact, and"
        " what it waits for is restored. Its messages show again after its next turn."
    ),
    "connect_history_pipeline": (
        "This thread runs a pipeline, whose conversation the agent runtime does not keep; the pipeline's view"
        " and what it waits for are restored."
    ),
    # The conversation history (GET /threads/{threadId}/messages).
    "history_unavailable": (
        "The conversation cannot be read from the agent runtime now (it restarted, is down, or keeps no"
        " transcript); try again after Retry-After seconds. The thread itself is intact: GET"
        " /threads/{{threadId}} still shows its state and pending interrupts."
    ),
    "history_pipeline": (
        "This thread runs a pipeline, whose conversation the agent runtime does not keep in the session"
        " transcript; GET /threads/{{threadId}} and the pipeline events show where it stands."
    ),
    "history_gone": (
        "The agent runtime no longer holds this conversation (it restarted, or keeps no transcript): asking again"
        " does not help; the thread's next turn makes it readable again. The thread itself is intact: GET"
        " /threads/{{threadId}} still shows its state and pending interrupts."
    ),
    "history_busy": "Too many conversations are being read at once; try again after Retry-After seconds.",
    "history_too_large": (
        "This thread's conversation is larger than this server reads at once (--history-max-bytes);"
        " GET /threads/{{threadId}} still shows its state and pending interrupts."
    ),
    "invalid_history_limit": "limit must be a whole number of turns from 1 to {max}.",
    "invalid_history_cursor": "before must be a cursor this route returned (the before of an earlier page).",
    # GET /threads (the thread list).
    "thread_list_bad_limit": "limit must be a whole number from 1 to {most}.",
    "thread_list_bad_cursor": "cursor must be a nextCursor of an earlier GET /threads answer, unchanged.",
    "thread_list_bad_state": "state must be one or more of {states}, separated by commas.",
    "thread_list_bad_user_id": "userId must not be empty, nor longer than 1024 characters.",
    "thread_list_user_id_required": (
        "With the shared token nobody is named: say whose threads to list with ?userId= (the userId their runs sent)."
    ),
}
