"""AG-UI request bodies as the protocol reference and the clients write them."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Callable
from typing import Any

Payload = dict[str, Any]
Mutation = Callable[[Payload], None]

MIB = 1024 * 1024


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def make_png(width: int = 2, height: int = 2) -> bytes:
    """A whole PNG (red pixels), as a decoder reads it."""
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(rows)) + png_chunk(b"IEND", b"")


# Whole images (64x64 red; JPEG and WebP as Pillow writes them, checked to decode).
PNG = make_png()
JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4nICIsIxwcKDcpLDAxNDQ0"
    "Hyc5PTgyPC4zNDL/2wBDAQkJCQwLDBgNDRgyIRwhMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIy"
    "MjL/wAARCABAAEADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQID"
    "AAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlq"
    "c3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3"
    "+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEI"
    "FEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImK"
    "kpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwDi"
    "6KKK+ZP3EKKKKACiiigAooooAKKKKACiiigAooooAKKKKACiiigAooooAKKKKACiiigAooooAKKKKACiiigAooooA//Z"
)
GIF = base64.b64decode(
    "R0lGODdhQABAAIEAAP8AAAAAAAAAAAAAACwAAAAAQABAAEAIaQABCBxIsKDBgwgTKlzIsKHDhxAjSpxIsaLFixgzatzIsaPHjyBDihxJ"
    "sqTJkyhTqlzJsqXLlzBjypxJs6bNmzhz6tzJs6fPn0CDCh1KtKjRo0iTKl3KtKnTp1CjSp1KtarVq1izagUQEAA7"
)
WEBP = base64.b64decode(
    "UklGRlYAAABXRUJQVlA4IEoAAAAQBACdASpAAEAAPm02mEkkIyKhIggAgA2JaQB2APwAACBupqAK8QtyAAD+8JtD//5BcsLrka///ID/"
    "kB/yA//j3xbjo8cQgAAAAA=="
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def image_part(data: bytes = PNG, mime_type: str = "image/png") -> Payload:
    return {"type": "image", "source": {"type": "data", "value": b64(data), "mimeType": mime_type}}


def iac_code(**extra: Any) -> Payload:
    return {
        "schemaVersion": 1,
        "rosInvocationId": "invocation-1",
        "cwd": "/workspace/session-1",
        "runMode": "normal",
        **extra,
    }


def envelope_0_1() -> Payload:
    """The minimal normal request of the protocol reference (AG-UI 0.1 shape)."""
    return {
        "threadId": "8473547e-c8ed-4aef-a84c-603a6a8d42da",
        "runId": "32c263f2-b0b0-42ac-905c-524a0a9bb652",
        "state": {},
        "messages": [{"id": "message-1", "role": "user", "content": "创建一个 VPC 模板"}],
        "tools": [],
        "context": [],
        "forwardedProps": {"iacCode": iac_code()},
    }


def envelope_1_0() -> Payload:
    """AG-UI 1.0 requires only threadId, runId and messages (+ our forwardedProps)."""
    return {
        "threadId": "thread-1",
        "runId": "run-1",
        "protocolVersion": "1.0",
        "messages": [{"id": "message-1", "role": "user", "content": "hello"}],
        "forwardedProps": {"iacCode": iac_code()},
    }


def envelope_client_1_0() -> Payload:
    """Shaped like ``AbstractAgent.prepareRunAgentInput`` of ``@ag-ui/client`` 1.0.

    Same keys in the same order (``protocolVersion`` included, activity
    messages already filtered out, ``resume`` only when given), and the
    messages as the client's event reducer materialises them.
    """
    return {
        "threadId": "2d1f7c1e-4a07-4a8e-9d5f-0b6f9e0d7a11",
        "runId": "a9e2c6d0-3b1f-4f7e-8c2a-5d4e3f2a1b00",
        "protocolVersion": "1.0",
        "tools": [],
        "context": [],
        "forwardedProps": {
            "iacCode": iac_code(preferredLanguage="zh-CN", userId="user-7"),
            "copilotkit": {"agent": "iac"},
        },
        "state": {},
        "messages": [
            {"id": "u-1", "role": "user", "content": "List my stacks"},
            {"id": "r-1", "role": "reasoning", "content": "The user wants a list."},
            {
                "id": "a-1",
                "role": "assistant",
                "content": "Let me look.",
                "toolCalls": [
                    {
                        "id": "call-1",
                        "type": "function",
                        "function": {"name": "ros_stack", "arguments": '{"op":"list"}'},
                    }
                ],
            },
            {"id": "t-1", "toolCallId": "call-1", "role": "tool", "content": "[]"},
            {"id": "a-2", "role": "assistant", "content": "You have no stacks."},
            {"id": "s-1", "role": "system", "content": "Be brief.", "name": "ops"},
            {"id": "d-1", "role": "developer", "content": "Prefer YAML."},
            {
                "id": "u-2",
                "role": "user",
                "content": [{"type": "text", "text": "Deploy this"}, image_part()],
            },
        ],
    }


def envelope_client_1_0_resume() -> Payload:
    payload = envelope_client_1_0()
    payload["runId"] = "run-2"
    payload["resume"] = [
        {
            "interruptId": "permission-1",
            "status": "resolved",
            "payload": {"decision": "allow_once"},
        },
        {"interruptId": "question-1", "status": "cancelled"},
    ]
    return payload


def mutated(base: Callable[[], Payload], mutation: Mutation) -> Payload:
    payload = base()
    mutation(payload)
    return payload


def iac(payload: Payload) -> Payload:
    """``forwardedProps.iacCode`` of a payload."""
    return payload["forwardedProps"]["iacCode"]  # type: ignore[no-any-return]
