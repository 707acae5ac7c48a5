"""The input contract, written once: JSON Schema (2020-12) of every request body.

This module is the single definition of what ``POST /`` and the cancel route
accept. :mod:`.parsing` checks requests against it (compiled by
:mod:`.schema_compiler`), and ``python -m aguiadapter.web.openapi --write``
copies it into ``components.schemas`` of the OpenAPI document, so the
document and the checks cannot disagree.

Strict exactly where the protocol reference is: ``forwardedProps.iacCode``
(unknown members refused) and ``tools`` (empty). The user message a new turn
sends is checked in depth too (:data:`NEW_USER_MESSAGE`, applied by
:mod:`.parsing` to the latest user message of a run that is not a resume):
under AG-UI 1.0 its parts are AG-UI's content parts, and the ones the runtime
cannot use are skipped (:mod:`.content`); under ``--compat iac-code-agui``
:data:`NEW_USER_MESSAGE_COMPAT` refuses them, as the reference does.
Everything else of the AG-UI envelope is AG-UI's: the members AG-UI 1.0
describes are type-checked wherever they sit (every content part included),
members it does not describe are ignored.

Some rules are not JSON Schema's to say and live in code, each documented in
the description of its field: image bytes (:mod:`.content`) and the
workspace path (:mod:`.workspace`).

``x-refusal`` maps a keyword of a schema to the catalog message id a
refusal by that keyword reads (see :mod:`.refusals`); ``x-newUserMessage``
(and ``x-newUserMessageCompat``) names, for readers of the OpenAPI document,
the schema the latest user message of a new turn must also match (in the
compatibility profile). ``x-`` members and annotations
(``description``, ``examples``...) never change what a schema accepts.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "CANCEL_REQUEST",
    "CONNECT_REQUEST",
    "INPUT_SCHEMAS",
    "MAX_IDENTIFIER_LENGTH",
    "MAX_INVOCATION_ID_LENGTH",
    "MESSAGE_ROLES",
    "NEW_USER_MESSAGE",
    "NEW_USER_MESSAGE_COMPAT",
    "RUN_AGENT_INPUT",
    "Schema",
]

Schema = dict[str, Any]

MAX_IDENTIFIER_LENGTH: Final = 4096
"""Longest ``threadId`` or ``runId`` accepted (in characters)."""

MAX_CREDENTIAL_LENGTH: Final = 4096
"""Longest credential (``llmApiKey``, the Alibaba Cloud keys): it travels in an HTTP header."""

MAX_INVOCATION_ID_LENGTH: Final = 256
"""Longest ``rosInvocationId`` (the protocol reference: 最长 256 字符)."""

RUN_AGENT_INPUT: Final = "RunAgentInput"
NEW_USER_MESSAGE: Final = "NewUserMessage"
#: The new user message as the protocol reference accepts it (``--compat iac-code-agui``).
NEW_USER_MESSAGE_COMPAT: Final = "NewUserMessageIacCodeAgui"
CANCEL_REQUEST: Final = "CancelRequest"
CONNECT_REQUEST: Final = "ConnectRequest"

MESSAGE_ROLES: Final = {
    "user": "UserMessage",
    "assistant": "AssistantMessage",
    "tool": "ToolMessage",
    "system": "SystemMessage",
    "developer": "DeveloperMessage",
    "reasoning": "ReasoningMessage",
    "activity": "ActivityMessage",
}
"""AG-UI 1.0 message roles and the component describing each."""

REFUSED_PART_TYPES: Final = ("audio", "video", "document", "binary")
REFUSED_SOURCE_TYPES: Final = ("url", "file")


def _part(kind: Schema, field: str, value: Schema, metadata: Schema, *, description: str | None = None) -> Schema:
    """A content part: its ``type``, its one required ``field``, an optional ``id`` and ``metadata``."""
    schema: Schema = {"type": "object", "required": ["type", field]}
    if description is not None:
        schema["description"] = description
    schema["properties"] = {"type": kind, field: value, "id": _optional("string"), "metadata": metadata}
    return schema


def _ref(name: str, **siblings: Any) -> Schema:
    return {"$ref": f"#/components/schemas/{name}", **siblings}


def _optional(kind: str, description: str | None = None) -> Schema:
    schema: Schema = {"type": [kind, "null"]}
    if description:
        schema["description"] = description
    return schema


_JSON_OBJECT_OR_NULL: Final[Schema] = {
    "type": ["object", "null"],
    "description": "Any JSON object, carried without interpretation (or null).",
}


def _discriminated(key: str, mapping: dict[str, str]) -> list[Schema]:
    """``allOf`` branches: the component named for the value of ``key``."""
    return [
        {"if": {"properties": {key: {"const": value}}, "required": [key]}, "then": _ref(name)}
        for value, name in mapping.items()
    ]


def _ag_ui_message(role: str, description: str, required: list[str], fields: Schema) -> Schema:
    """A history message as AG-UI defines it; members it may add are ignored."""
    return {
        "type": "object",
        "description": description,
        "required": ["id", "role", *required],
        "properties": {
            "id": {"type": "string"},
            "role": {"const": role},
            **fields,
            "encryptedValue": _optional("string"),
            "metadata": _JSON_OBJECT_OR_NULL,
            "subagentRunId": _optional("string"),
        },
    }


_IDS: Final[dict[str, Schema]] = {
    "Identifier": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_IDENTIFIER_LENGTH,
        "description": (
            f"Any non-empty string of at most {MAX_IDENTIFIER_LENGTH} characters (Unicode code points): "
            "blanks, newlines and any other character are fine. Used for threadId and runId."
        ),
        "examples": ["8473547e-c8ed-4aef-a84c-603a6a8d42da"],
    },
    "InvocationId": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_INVOCATION_ID_LENGTH,
        "description": f"A non-empty string of at most {MAX_INVOCATION_ID_LENGTH} characters.",
        "examples": ["invocation-1"],
    },
    "Credential": {
        "type": ["string", "null"],
        "writeOnly": True,
        "maxLength": MAX_CREDENTIAL_LENGTH,
        "not": {"type": "string", "pattern": "[^\\x20-\\x7e]"},
        "x-refusal": {"not": "input_credential_not_ascii", "maxLength": "input_credential_too_long"},
        "description": (
            f"A secret: printable ASCII only (no control characters) and at most {MAX_CREDENTIAL_LENGTH} "
            "characters, since it travels in HTTP headers. "
            "Forwarded to the runtime for this request only; never stored, logged or echoed in an error."
        ),
    },
}

_IAC_CODE: Final[dict[str, Schema]] = {
    "ThinkingOptions": {
        "type": ["object", "null"],
        "additionalProperties": False,
        "description": "Per-request thinking overrides (forwardedProps.iacCode.thinking), or null.",
        "properties": {
            "enabled": _optional("boolean", "Ask for thinking."),
            "effort": _optional("string", "Thinking effort, where the provider supports it."),
            "budget": {
                "type": ["integer", "null"],
                "minimum": 1,
                "x-refusal": {"minimum": "input_integer_not_positive"},
                "description": "Thinking budget (a positive integer), where the provider supports it.",
            },
        },
    },
    "AlibabaCloudCredentials": {
        "type": ["object", "null"],
        "additionalProperties": False,
        "description": (
            "Request-scoped Alibaba Cloud credentials, or null. Forwarded to the runtime for this request "
            "only; never written to the thread state, never logged, and masked in the idempotency digest "
            "(a retry with a refreshed STS token is the same request)."
        ),
        "properties": {
            "accessKeyId": _ref("Credential", description="AccessKey ID."),
            "accessKeySecret": _ref("Credential", description="AccessKey secret."),
            "securityToken": _ref("Credential", description="STS token."),
            "regionId": {
                "type": ["string", "null"],
                # The runtime refuses any other form, and only once the run has started.
                "pattern": "^\\s*(?:[a-z0-9][a-z0-9-]{0,62})?\\s*$",
                "x-refusal": {"pattern": "input_region_id_invalid"},
                "description": (
                    "Default region, e.g. cn-hangzhou: lower-case letters, digits and hyphens, at most 63 "
                    "characters (blank means none)."
                ),
            },
        },
    },
    "IacCodeProps": {
        "type": "object",
        "additionalProperties": False,
        "required": ["schemaVersion", "rosInvocationId", "cwd"],
        "description": (
            "forwardedProps.iacCode, the iac-code extension, version 1. Strict: unknown members are refused "
            "with INVALID_INPUT, and no value is coerced (\"1\" is not 1, true is not a number). Optional "
            "members may be omitted or null."
        ),
        "properties": {
            "schemaVersion": {"const": 1, "description": "Extension version: the number 1."},
            "rosInvocationId": _ref(
                "InvocationId",
                description=(
                    "The invocation of the current execution. The run that raised an interrupt and its "
                    "resume must use the same value; after a turn ends normally the next turn may use a new "
                    "one. The cancel route needs the current value too."
                ),
            ),
            "cwd": {
                "type": "string",
                "description": (
                    "Absolute workspace path for this thread. Refused (INVALID_INPUT) before any stream when "
                    "relative, when it has a '..' segment or a NUL, when it is over 4095 bytes or one of its "
                    "components over 255 bytes (UTF-8), when (after resolving symlinks) it lies outside every "
                    "allowed root (--allowed-cwd / IAC_CODE_AGUI_ALLOWED_CWDS, when configured), when it "
                    "exists and is not a directory, when it lies below a regular file, when resolving it "
                    "meets a symlink loop, or when the server may not look into it. A thread is bound to the "
                    "resolved cwd of its first run (THREAD_BINDING_CONFLICT afterwards)."
                ),
                "examples": ["/workspace/session-1"],
            },
            "model": _optional("string", "Model override for this request."),
            "llmApiKey": _ref("Credential", description="LLM provider key for this request."),
            "thinking": _ref("ThinkingOptions"),
            "userId": _optional(
                "string",
                "Caller identity for telemetry and binding: a thread is bound to the userId of its first run "
                "(THREAD_BINDING_CONFLICT afterwards).",
            ),
            "channel": _optional("string", "Calling channel metadata."),
            "preferredLanguage": _optional(
                "string",
                "User-visible language for this request, e.g. zh-CN. Also picks the language of error "
                "messages (English and Simplified Chinese ship; values over 64 characters are ignored for "
                "that).",
            ),
            "candidatePresentation": {
                "type": ["string", "null"],
                "enum": ["standard", "rich", None],
                "description": "How pipeline candidates are presented.",
            },
            "runMode": {
                "type": ["string", "null"],
                "enum": ["normal", "pipeline", None],
                "description": "Run mode; when absent the runtime decides.",
            },
            "pipelineName": _optional("string", "Pipeline name, e.g. selling."),
            "cleanupOnly": _optional("boolean", "Ask the pipeline to run its cleanup path only."),
            "alibabaCloud": _ref("AlibabaCloudCredentials"),
        },
    },
    "ForwardedProps": {
        "type": "object",
        "required": ["iacCode"],
        "description": "Must hold iacCode; other members (written by other applications) are accepted and ignored.",
        "properties": {"iacCode": _ref("IacCodeProps")},
    },
}

_ANY_JSON: Final[Schema] = {"description": "Any JSON value, carried without interpretation."}

# AG-UI 1.0 content parts, as the schema of the protocol describes them: the
# members it describes are checked, members it does not are ignored, and a
# part (or a media source) of a kind it does not know is not malformed.
_CONTENT_PARTS: Final[dict[str, Schema]] = {
    "ContentPart": {
        "type": "object",
        "required": ["type"],
        "description": (
            "An AG-UI 1.0 content part (user and tool messages). The members AG-UI describes are checked "
            "(a described member of the wrong type is INVALID_INPUT); members it does not describe are ignored, "
            "and a part of a type it does not describe is not malformed."
        ),
        "properties": {"type": {"type": "string"}},
        "allOf": _discriminated(
            "type",
            {"text": "TextContentPart", "image": "MediaContentPart", "audio": "MediaContentPart",
             "video": "MediaContentPart", "document": "MediaContentPart"},
        ),
    },
    "TextContentPart": _part({"const": "text"}, "text", {"type": "string"}, _ANY_JSON),
    "MediaContentPart": _part(
        {"type": "string"}, "source", _ref("PartSource"), _ANY_JSON,
        description="An image, audio, video or document part.",
    ),
    "PartSource": {
        "type": "object",
        "required": ["type"],
        "description": (
            "Where a media part's bytes are: inline data, a URL, or a provider file handle (AG-UI 1.0). A source "
            "of another kind is not malformed: its part cannot be used."
        ),
        "properties": {"type": {"type": "string"}},
        "allOf": _discriminated("type", {"data": "DataPartSource", "url": "UrlPartSource", "file": "FilePartSource"}),
    },
    "DataPartSource": {
        "type": "object",
        "required": ["type", "value", "mimeType"],
        "properties": {"type": {"const": "data"}, "value": {"type": "string"}, "mimeType": {"type": "string"}},
    },
    "UrlPartSource": {
        "type": "object",
        "required": ["type", "value"],
        "properties": {"type": {"const": "url"}, "value": {"type": "string"}, "mimeType": _optional("string")},
    },
    "FilePartSource": {
        "type": "object",
        "required": ["type", "value"],
        "properties": {
            "type": {"const": "file"},
            "value": {"type": "string"},
            "provider": _optional("string"),
            "mimeType": _optional("string"),
        },
    },
}

_NEW_USER_CONTENT: Final[dict[str, Schema]] = {
    NEW_USER_MESSAGE: {
        "type": "object",
        "required": ["id", "content"],
        "description": (
            "What the latest user message of a run that starts a turn (no resume) must also be: it is the "
            "message sent to the runtime, so its content is checked in depth. Other members of the message "
            "are AG-UI's and ignored here. AG-UI 1.0 profile (the default): a part the server cannot use (an "
            "image by URL or provider file handle, an inline image other than PNG, JPEG, GIF or WebP, audio, "
            "video, a document, a part of an unknown type) is skipped, and the run says so in an "
            "iac-code.input.skipped.v1 CUSTOM event before its first text; a message left with nothing usable "
            "is INVALID_INPUT. An inline image is checked in depth either way (base64, signature, size limits)."
        ),
        "properties": {
            "id": {"type": "string", "minLength": 1, "description": "Sent to the runtime as the message id."},
            "content": {
                "type": ["string", "array"],
                "pattern": "\\S",
                "minItems": 1,
                "items": _ref("ContentPart"),
                "x-refusal": {
                    "type": "input_user_content_type",
                    "pattern": "input_user_content_empty",
                    "minItems": "input_user_content_empty",
                },
                "description": "A non-blank string, or a non-empty list of content parts.",
            },
        },
    },
    NEW_USER_MESSAGE_COMPAT: {
        "type": "object",
        "required": ["id", "content"],
        "description": (
            "The latest user message of a new turn under --compat iac-code-agui (the protocol reference's "
            "rules): only text and inline images are accepted; any other part is refused with INVALID_INPUT."
        ),
        "properties": {
            "id": {"type": "string", "minLength": 1, "description": "Sent to the runtime as the message id."},
            "content": _ref("UserContent"),
        },
    },
    "UserContent": {
        "type": ["string", "array"],
        "pattern": "\\S",
        "items": _ref("InputContentPart"),
        "contains": {
            "anyOf": [
                {"type": "object", "required": ["type"], "properties": {"type": {"const": "image"}}},
                {
                    "type": "object",
                    "required": ["type", "text"],
                    "properties": {"type": {"const": "text"}, "text": {"type": "string", "pattern": "\\S"}},
                },
            ]
        },
        "x-refusal": {
            "type": "input_user_content_type",
            "pattern": "input_user_content_empty",
            "contains": "input_user_content_empty",
        },
        "description": "A non-blank string, or a list of parts with at least one image or one non-blank text part.",
    },
    "InputContentPart": {
        "type": "object",
        "required": ["type"],
        "description": (
            "A part of the new user message under --compat iac-code-agui: text, or an inline image. Audio, "
            "video, document and binary parts are refused by name (INVALID_INPUT). Members a part does not "
            "describe are ignored."
        ),
        "properties": {
            "type": {
                "type": "string",
                "not": {"enum": list(REFUSED_PART_TYPES)},
                "enum": ["text", "image"],
                "x-refusal": {"not": "input_content_part_unsupported"},
            }
        },
        "allOf": _discriminated("type", {"text": "TextInputPart", "image": "ImageInputPart"}),
    },
    "TextInputPart": _part({"const": "text"}, "text", {"type": "string"}, _JSON_OBJECT_OR_NULL),
    "ImageInputPart": _part({"const": "image"}, "source", _ref("ImageSource"), _JSON_OBJECT_OR_NULL),
    "ImageSource": {
        "type": "object",
        "required": ["type"],
        "description": (
            "Where an image is: only inline data is accepted; url and file sources (AG-UI 1.0) are refused by name."
        ),
        "properties": {
            "type": {
                "type": "string",
                "not": {"enum": list(REFUSED_SOURCE_TYPES)},
                "const": "data",
                "x-refusal": {"not": "input_image_source_unsupported"},
            }
        },
        "if": {"properties": {"type": {"const": "data"}}, "required": ["type"]},
        "then": _ref("ImageDataSource"),
    },
    "ImageDataSource": {
        "type": "object",
        "required": ["type", "value", "mimeType"],
        "description": "An inline image.",
        "properties": {
            "type": {"const": "data"},
            "value": {
                "type": "string",
                "contentEncoding": "base64",
                "description": (
                    "Standard, padded base64 (RFC 4648 section 4) without line breaks. The decoded bytes must "
                    "be at most 8 MiB and must start with the signature of mimeType; all images of one "
                    "message together at most 10 MiB."
                ),
            },
            "mimeType": {
                "type": "string",
                "description": "image/png, image/jpeg, image/gif or image/webp (case-insensitive).",
                "examples": ["image/png"],
            },
        },
    },
}

_HISTORY: Final[dict[str, Schema]] = {
    "Message": {
        "type": "object",
        "required": ["role"],
        "description": (
            "An AG-UI 1.0 message, selected by role. A whole conversation as the client keeps it is accepted; "
            "members a newer AG-UI client may add are ignored. Only the latest user message of a new turn is "
            "sent to the runtime (see NewUserMessage)."
        ),
        "properties": {"role": {"type": "string", "enum": list(MESSAGE_ROLES)}},
        "allOf": _discriminated("role", MESSAGE_ROLES),
    },
    "UserMessage": _ag_ui_message(
        "user",
        "A user message. Parts of earlier messages are kept as the client sent them.",
        ["content"],
        {
            "content": {"type": ["string", "array"], "items": _ref("ContentPart")},
            "name": _optional("string"),
        },
    ),
    "AssistantMessage": _ag_ui_message(
        "assistant",
        "An agent message kept in the conversation (history only).",
        [],
        {
            "content": _optional("string"),
            "toolCalls": {"type": ["array", "null"], "items": _ref("ToolCall")},
            "name": _optional("string"),
        },
    ),
    "ToolCall": {
        "type": "object",
        "required": ["id", "function"],
        "properties": {
            "id": {"type": "string"},
            "type": {"const": "function"},
            "function": _ref("FunctionCall"),
            "encryptedValue": _optional("string"),
            "metadata": _JSON_OBJECT_OR_NULL,
        },
    },
    "FunctionCall": {
        "type": "object",
        "required": ["name", "arguments"],
        "properties": {"name": {"type": "string"}, "arguments": {"type": "string", "description": "JSON text."}},
    },
    "ToolMessage": _ag_ui_message(
        "tool",
        "A tool result kept in the conversation (history only).",
        ["content", "toolCallId"],
        {
            "content": {"type": ["string", "array"], "items": _ref("ContentPart")},
            "toolCallId": {"type": "string"},
            "error": _optional("string"),
        },
    ),
    "SystemMessage": _ag_ui_message(
        "system", "System instructions (history only).", ["content"],
        {"content": {"type": "string"}, "name": _optional("string")},
    ),
    "DeveloperMessage": _ag_ui_message(
        "developer", "Developer instructions (history only).", ["content"],
        {"content": {"type": "string"}, "name": _optional("string")},
    ),
    "ReasoningMessage": _ag_ui_message(
        "reasoning", "A reasoning span kept in the conversation (history only).", ["content"],
        {"content": {"type": "string"}},
    ),
    "ActivityMessage": _ag_ui_message(
        "activity", "Structured progress kept as a message (history only).", ["activityType", "content"],
        {"activityType": {"type": "string"}, "content": {"type": "object"}},
    ),
}

_ENVELOPE: Final[dict[str, Schema]] = {
    "ContextItem": {
        "type": "object",
        "required": ["description", "value"],
        "description": "Ambient context (accepted, not forwarded to the runtime).",
        "properties": {"description": {"type": "string"}, "value": {"type": "string"}},
    },
    "ResumeEntry": {
        "type": "object",
        "required": ["interruptId", "status"],
        "description": (
            "The answer to one pending interrupt. A resolved answer needs a payload that validates against "
            "the interrupt's responseSchema (else RESUME_PAYLOAD_INVALID, and the interrupt stays pending). "
            "cancelled denies a permission, and cancels the execution for any other kind of input (the run "
            "ends with RUN_FINISHED and outcome cancelled; RUN_ERROR CANCELLED under --compat iac-code-agui)."
        ),
        "properties": {
            "interruptId": {"type": "string", "minLength": 1},
            "status": {"type": "string", "enum": ["resolved", "cancelled"]},
            "payload": {"description": "Any JSON value; null counts as absent. Ignored when status is cancelled."},
            "metadata": _JSON_OBJECT_OR_NULL,
        },
    },
    RUN_AGENT_INPUT: {
        "type": "object",
        "x-refusal": {"type": "input_not_object"},
        "required": ["threadId", "runId", "messages", "forwardedProps"],
        "description": (
            "An AG-UI RunAgentInput, 0.1 or 1.0 envelope; members a newer AG-UI client may add are ignored. "
            "A run that is not a resume needs a user message, and its latest user message must also be a "
            "NewUserMessage whose id differs from the last user message already sent on the thread; a "
            "resume (non-empty resume[]) needs no new message."
        ),
        "properties": {
            "threadId": _ref(
                "Identifier", description="Stable conversation id; one A2A context and one iac-code session per thread."
            ),
            "runId": _ref(
                "Identifier",
                description=(
                    "One HTTP/SSE run. Unique within the thread: reusing it answers DUPLICATE_RUN_ID (same "
                    "request) or RUN_ID_CONFLICT (different request). A request refused before its stream "
                    "opened does not use up its runId."
                ),
            ),
            "parentRunId": _optional("string", "Copied into RUN_STARTED."),
            "state": {"description": "Any JSON value; kept in the envelope, not used by the runtime. Default {}."},
            "messages": {"type": "array", "items": _ref("Message")},
            "tools": {
                "type": "array",
                "maxItems": 0,
                "x-refusal": {"maxItems": "input_tools_unsupported"},
                "description": "Client-side tools are not supported: only an empty list (or no member) is accepted.",
            },
            "context": {"type": "array", "items": _ref("ContextItem")},
            "forwardedProps": _ref("ForwardedProps"),
            "resume": {
                "type": ["array", "null"],
                "items": _ref("ResumeEntry"),
                "description": (
                    "Answers to every pending interrupt of the thread, each exactly once. Non-empty: this run "
                    "resumes instead of starting a turn."
                ),
            },
            "protocolVersion": _optional("string", "Sent by AG-UI 1.0 clients; not interpreted."),
        },
        "if": {"required": ["resume"], "properties": {"resume": {"type": "array", "minItems": 1}}},
        # Documentation for readers of the OpenAPI document; parsing applies it.
        "x-newUserMessage": _ref(NEW_USER_MESSAGE),
        # ... and under --compat iac-code-agui, the protocol reference's stricter one.
        "x-newUserMessageCompat": _ref(NEW_USER_MESSAGE_COMPAT),
        "else": {
            "properties": {
                "messages": {
                    "contains": {"type": "object", "required": ["role"], "properties": {"role": {"const": "user"}}},
                    "x-refusal": {"contains": "input_user_message_required"},
                }
            }
        },
    },
    CANCEL_REQUEST: {
        "type": "object",
        "x-refusal": {"type": "input_not_object"},
        "required": ["threadId", "rosInvocationId"],
        "description": "The body of the cancel route; other members are ignored.",
        "properties": {"threadId": _ref("Identifier"), "rosInvocationId": _ref("InvocationId")},
    },
}

# POST /connect: a RunAgentInput that names a thread to hydrate; it runs nothing.
_CONNECT: Final[dict[str, Schema]] = {
    CONNECT_REQUEST: {
        "type": "object",
        "x-refusal": {"type": "input_not_object"},
        "required": ["threadId"],
        "description": (
            "The body of POST /connect: an AG-UI RunAgentInput (the one a client would send to run), of which "
            "only threadId is required. The members it has are checked as POST / checks them, except that "
            "tools and messages are not: a connect runs nothing and sends no message. Its messages are ignored "
            "(the hydrate run's MESSAGES_SNAPSHOT replaces them), and so are state, tools, context and "
            "parentRunId; forwardedProps.iacCode, when present, is strict as on POST /, and its userId must be "
            "the thread's (else 404, as for an unknown thread)."
        ),
        "properties": {
            "threadId": _ref("Identifier", description="The thread to hydrate."),
            "runId": _ref(
                "Identifier",
                description=(
                    "The hydrate run's runId (a fresh one when absent or when it names one of the thread's "
                    "runs). Not remembered: it does not use up a run id of the thread."
                ),
            ),
            "parentRunId": _optional("string", "Ignored."),
            "state": {"description": "Ignored."},
            "messages": {"type": "array", "description": "Ignored: the snapshot replaces the client's messages."},
            "tools": {"type": "array", "description": "Ignored."},
            "context": {"type": "array", "description": "Ignored."},
            "forwardedProps": {
                "type": "object",
                "description": "May hold iacCode (checked as on POST /); other members are ignored.",
                "properties": {"iacCode": _ref("IacCodeProps")},
            },
            "resume": {
                "type": ["array", "null"],
                "maxItems": 0,
                "x-refusal": {"maxItems": "connect_resume_refused"},
                "description": "A connect answers nothing: only an empty list (or no member) is accepted.",
            },
            "protocolVersion": _optional("string", "Not interpreted."),
        },
    },
}

INPUT_SCHEMAS: Final[dict[str, Schema]] = {
    **_ENVELOPE,
    **_IDS,
    **_IAC_CODE,
    **_HISTORY,
    **_NEW_USER_CONTENT,
    **_CONTENT_PARTS,
    **_CONNECT,
}
"""Every input component, by its name under ``#/components/schemas``."""
