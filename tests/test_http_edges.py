"""Edge cases of input through HTTP: refused before the stream, or run; never a refusal inside it.

Strict where the contract is strict, tolerant where it is silent. Each table
row is one request a new user might send: what it gets back (status, code,
and the field the message names), in English and in Chinese.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
from ag_ui.core import RunAgentInput as AgUiRunAgentInput

from aguiadapter.protocol.input_schema import MAX_IDENTIFIER_LENGTH
from aguiadapter.workspace import MAX_PATH_BYTES
from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import Reply, RunningAdapter, run_body, start_adapter
from tests.support.envelopes import PNG, image_part

CWD = "forwardedProps.iacCode.cwd"
CANCEL = "/extensions/iac-code/v1/executions/{}/cancel"
LANGUAGES = {"en": "en-US,en;q=0.8", "zh-CN": "zh-CN,zh;q=0.9"}

Body = dict[str, Any]


def body(workspace: Path, **changes: Any) -> Body:
    payload = run_body(thread_id=f"t-{uuid.uuid4()}", text="hello", cwd=str(workspace))
    payload.update(changes)
    return payload


def expect_error(reply: Reply, status: int, code: str, field: str | None = None) -> str:
    """The documented JSON error, and nothing else; returns its message."""
    assert reply.status == status, reply.body[:500]
    assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
    document = reply.json()
    assert set(document) == {"error"} and set(document["error"]) == {"code", "message"}, document
    assert document["error"]["code"] == code, document
    message = str(document["error"]["message"])
    if field is not None:
        assert field in message, message
    return message


@pytest.fixture(params=sorted(LANGUAGES))
def language(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --- 1. not JSON by RFC 8259 --------------------------------------------------------------

NOT_JSON: dict[str, Callable[[Body], bytes]] = {
    "NaN": lambda b: json.dumps({**b, "state": {"x": float("nan")}}).encode(),
    "Infinity": lambda b: json.dumps({**b, "state": {"x": float("inf")}}).encode(),
    "-Infinity": lambda b: json.dumps({**b, "state": {"x": float("-inf")}}).encode(),
    "a number beyond a double": lambda b: json.dumps(b).encode().replace(b'"state": {}', b'"state": {"x": 1e999}'),
    "UTF-16 with a byte order mark": lambda b: json.dumps(b).encode("utf-16"),
    "UTF-16 LE without one": lambda b: json.dumps(b).encode("utf-16-le"),
    "UTF-32": lambda b: json.dumps(b).encode("utf-32"),
    "Latin-1": lambda b: json.dumps({**b, "state": {"x": "été"}}, ensure_ascii=False).encode("latin-1"),
}


@pytest.mark.parametrize("encode", NOT_JSON.values(), ids=NOT_JSON.keys())
async def test_a_body_that_is_not_rfc_8259_json_is_refused(
    adapter: RunningAdapter, workspace: Path, encode: Callable[[Body], bytes], language: str
) -> None:
    data = encode(body(workspace))
    headers = {"Accept-Language": LANGUAGES[language]}
    expect_error(await adapter.post("/", data, headers), 400, "INVALID_JSON")
    cancel = encode({"threadId": "t", "rosInvocationId": "i", "state": {}})
    expect_error(await adapter.post(CANCEL.format("exec-1"), cancel, headers), 400, "INVALID_JSON")


async def test_a_utf_8_byte_order_mark_is_tolerated(adapter: RunningAdapter, workspace: Path) -> None:
    reply = await adapter.post("/", codecs.BOM_UTF8 + json.dumps(body(workspace)).encode())
    assert reply.events()[-1]["type"] == "RUN_FINISHED"


# --- 2. a workspace that cannot be one ------------------------------------------------------


def deep(root: Path, total_bytes: int) -> str:
    path = str(root)
    while len(path) + 101 < total_bytes:
        path += "/" + "d" * 100
    return path + "/" + "e" * (total_bytes - len(path) - 1)


def symlink_loop(root: Path) -> str:
    (root / "loop-a").symlink_to(root / "loop-b")
    (root / "loop-b").symlink_to(root / "loop-a")
    return str(root / "loop-a" / "work")


def a_file(root: Path) -> str:
    (root / "notes.txt").write_text("not a directory")
    return str(root / "notes.txt")


def below_a_file(root: Path) -> str:
    return a_file(root) + "/work"


BAD_WORKSPACES: dict[str, tuple[Callable[[Path], str], str]] = {
    "a component over 255 bytes": (lambda root: str(root / ("n" * 256)), "255"),
    "a component of 86 three-byte characters": (lambda root: str(root / ("工" * 86)), "255"),
    "a path over 4095 bytes": (lambda root: deep(root, MAX_PATH_BYTES + 1), "4095"),
    "a symlink loop": (symlink_loop, "loop"),
    "a path below a regular file": (below_a_file, "file"),
    "a regular file": (a_file, "directory"),
    "a relative path": (lambda root: "workspaces/session-1", "absolute"),
    "outside the allowed roots": (lambda root: str(root.parent), "allowed"),
}


@pytest.mark.parametrize(("make", "says"), BAD_WORKSPACES.values(), ids=BAD_WORKSPACES.keys())
async def test_a_workspace_that_cannot_be_one_is_refused_before_the_stream(
    adapter: RunningAdapter, workspace: Path, make: Callable[[Path], str], says: str
) -> None:
    cwd = make(workspace.parent)
    reply = await adapter.run(body(workspace, forwardedProps={"iacCode": {
        "schemaVersion": 1, "rosInvocationId": "inv-1", "cwd": cwd}}))
    message = expect_error(reply, 400, "INVALID_INPUT", CWD)
    assert says in message and "Errno" not in message


async def test_a_workspace_refusal_reads_in_chinese(adapter: RunningAdapter, workspace: Path) -> None:
    reply = await adapter.run(
        body(workspace, forwardedProps={"iacCode": {"schemaVersion": 1, "rosInvocationId": "i",
                                                     "cwd": symlink_loop(workspace.parent)}}),
        {"Accept-Language": "zh-CN"},
    )
    assert "符号链接" in expect_error(reply, 400, "INVALID_INPUT", CWD)


# --- 3. a credential that cannot travel -----------------------------------------------------

CREDENTIALS: dict[str, tuple[str, Body]] = {
    "llmApiKey with accents": ("llmApiKey", {"llmApiKey": "sk-été-SECRET"}),
    "llmApiKey with a tab": ("llmApiKey", {"llmApiKey": "sk-\tSECRET"}),
    "accessKeyId with a newline": ("alibabaCloud.accessKeyId", {"alibabaCloud": {"accessKeyId": "LTAI\nSECRET"}}),
    "accessKeySecret with a NUL": ("alibabaCloud.accessKeySecret", {"alibabaCloud": {"accessKeySecret": "\x00SECRET"}}),
    "securityToken with a line separator": (
        "alibabaCloud.securityToken", {"alibabaCloud": {"securityToken": "SECRET\u2028"}}
    ),
    "securityToken in full-width letters": ("alibabaCloud.securityToken", {"alibabaCloud": {"securityToken": "ＳＥＣＲＥＴ"}}),
}


@pytest.mark.parametrize(("field", "props"), CREDENTIALS.values(), ids=CREDENTIALS.keys())
async def test_a_credential_that_is_not_printable_ascii_is_refused_unechoed(
    adapter: RunningAdapter, workspace: Path, field: str, props: Body, language: str
) -> None:
    payload = body(workspace)
    payload["forwardedProps"]["iacCode"].update(props)
    reply = await adapter.run(payload, {"Accept-Language": LANGUAGES[language]})
    message = expect_error(reply, 400, "INVALID_INPUT", f"forwardedProps.iacCode.{field}")
    assert "SECRET" not in message and "ＳＥＣＲＥＴ" not in message and "ASCII" in message


async def test_printable_ascii_credentials_are_forwarded(adapter: RunningAdapter, workspace: Path) -> None:
    payload = body(workspace)
    printable = "".join(chr(code) for code in range(0x20, 0x7F))
    payload["forwardedProps"]["iacCode"].update(llmApiKey=printable, alibabaCloud={"securityToken": printable})
    assert (await adapter.run(payload)).events()[-1]["type"] == "RUN_FINISHED"


# --- 4. every error is JSON ---------------------------------------------------------------


async def raw_exchange(adapter: RunningAdapter, request: bytes) -> Reply:
    """Send bytes no HTTP client would; read the one response."""
    host, port = adapter.url.removeprefix("http://").rstrip("/").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return Reply(int(status_line.split()[1]), headers, payload)


async def get(adapter: RunningAdapter, path: str, method: str = "GET", headers: dict[str, str] | None = None) -> Reply:
    async with adapter.session.request(method, adapter.url + path.lstrip("/"), headers=headers) as response:
        return Reply(response.status, dict(response.headers), await response.read())


HTTP_ERRORS: dict[str, tuple[Callable[[RunningAdapter], Any], int, str]] = {
    "an 8 KiB Accept-Language": (
        lambda a: a.run({}, {"Accept-Language": "en;q=0.1," * 1024}), 431, "HEADERS_TOO_LARGE"),
    "an 8 KiB header name": (lambda a: a.run({}, {"X-" + "n" * 8200: "1"}), 431, "HEADERS_TOO_LARGE"),
    "too many headers": (lambda a: a.run({}, {f"X-H{i}": "1" for i in range(200)}), 431, "HEADERS_TOO_LARGE"),
    "a 10,000-character execution id": (
        lambda a: a.post(CANCEL.format("e" * 10_000), {"threadId": "t", "rosInvocationId": "i"}), 414, "URI_TOO_LONG"),
    "an unknown path": (lambda a: get(a, "/nowhere"), 404, "NOT_FOUND"),
    "an execution id with a slash": (
        lambda a: a.post(CANCEL.format("a/b"), {"threadId": "t", "rosInvocationId": "i"}), 404, "NOT_FOUND"),
    "malformed HTTP": (lambda a: raw_exchange(a, b"GARBAGE\r\n\r\n"), 400, "BAD_REQUEST"),
    "a body whose gzip is broken": (
        lambda a: a.post("/", b"not gzip", {"Content-Encoding": "gzip"}), 400, "BAD_REQUEST"),
    "a bad Content-Length": (
        lambda a: raw_exchange(a, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n"), 400, "BAD_REQUEST"),
}


@pytest.mark.parametrize(("send", "status", "code"), HTTP_ERRORS.values(), ids=HTTP_ERRORS.keys())
async def test_every_error_the_server_answers_is_the_documented_json(
    adapter: RunningAdapter, send: Callable[[RunningAdapter], Any], status: int, code: str
) -> None:
    expect_error(await send(adapter), status, code)


METHODS: dict[str, tuple[str, str, set[str]]] = {
    "PUT /": ("PUT", "/", {"GET", "HEAD", "POST"}),
    "DELETE /health": ("DELETE", "/health", {"GET", "HEAD"}),
    "PUT on the cancel route": ("PUT", CANCEL.format("exec-1"), {"POST"}),
    "POST /openapi.json": ("POST", "/openapi.json", {"GET", "HEAD"}),
}


@pytest.mark.parametrize(("method", "path", "allowed"), METHODS.values(), ids=METHODS.keys())
async def test_a_method_the_route_does_not_take_is_405_with_allow(
    adapter: RunningAdapter, method: str, path: str, allowed: set[str], language: str
) -> None:
    reply = await get(adapter, path, method, {"Accept-Language": LANGUAGES[language]})
    message = expect_error(reply, 405, "METHOD_NOT_ALLOWED")
    assert {name.strip() for name in reply.headers["Allow"].split(",")} == allowed
    assert bool(re.search(r"[\u4e00-\u9fff]", message)) is (language == "zh-CN")


# --- 5. valid input is accepted ----------------------------------------------------------------

ACCEPTED_IDS: dict[str, str] = {
    "a single space": " ",
    "a newline": "tenant-1\nthread-7",
    "a 300-character composite key": "tenant-1|" + "k" * 291,
    "the longest": "t" * MAX_IDENTIFIER_LENGTH,
    "control characters and RTL marks": "\x01\u202e\x7f",
}


@pytest.mark.parametrize("thread_id", ACCEPTED_IDS.values(), ids=ACCEPTED_IDS.keys())
async def test_any_non_empty_thread_and_run_id_is_accepted(
    adapter: RunningAdapter, workspace: Path, thread_id: str
) -> None:
    events = (await adapter.run(body(workspace, threadId=thread_id, runId=thread_id[::-1]))).events()
    assert (events[0]["threadId"], events[0]["runId"]) == (thread_id, thread_id[::-1])
    assert events[-1]["type"] == "RUN_FINISHED"
    # The same ids name the same thread next time.
    again = body(workspace, threadId=thread_id, runId="run-2")
    assert (await adapter.run(again)).events()[-1]["type"] == "RUN_FINISHED"


TOLERATED: dict[str, Callable[[Body], None]] = {
    "an unknown field in a message": lambda b: b["messages"][0].update(thread_id="t-1"),
    "an unknown top-level member": lambda b: b.update(newerAgUiMember={"x": 1}),
    "an empty text earlier in the history": lambda b: b["messages"].insert(
        0, {"id": "m-0", "role": "user", "content": ""}),
    "earlier parts this adapter would not send": lambda b: b["messages"].insert(
        0, {"id": "m-0", "role": "user", "content": [
            {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}]}),
    "an unknown member of a context item": lambda b: b["context"].append(
        {"description": "tz", "value": "UTC+8", "origin": "browser"}),
}


@pytest.mark.parametrize("change", TOLERATED.values(), ids=TOLERATED.keys())
async def test_what_ag_ui_allows_is_not_refused(
    adapter: RunningAdapter, workspace: Path, change: Callable[[Body], None]
) -> None:
    payload = body(workspace)
    change(payload)
    AgUiRunAgentInput.model_validate(payload)  # the AG-UI models accept it too
    assert (await adapter.run(payload)).events()[-1]["type"] == "RUN_FINISHED"


STRICT: dict[str, tuple[Callable[[Body], None], str]] = {
    "an empty thread id": (lambda b: b.update(threadId=""), "threadId"),
    "a thread id over 4096 characters": (lambda b: b.update(threadId="t" * (MAX_IDENTIFIER_LENGTH + 1)), "threadId"),
    "an unknown iacCode member": (lambda b: b["forwardedProps"]["iacCode"].update(workspace="/x"),
                                  "forwardedProps.iacCode.workspace"),
    "a client-side tool": (lambda b: b.update(tools=[{"name": "t", "description": "d", "parameters": {}}]), "tools"),
    "an empty new message": (lambda b: b["messages"][0].update(content="  "), "messages[0].content"),
    "a PNG cut short in the new message": (
        lambda b: b["messages"][0].update(content=[image_part(PNG[:-20])]), "messages[0].content[0].source.value"),
    "a region ID the runtime would refuse": (
        lambda b: b["forwardedProps"]["iacCode"].update(alibabaCloud={"regionId": "杭州"}),
        "forwardedProps.iacCode.alibabaCloud.regionId"),
    "an image URL and nothing else in the new message": (
        lambda b: b["messages"][0].update(content=[{"type": "image", "source": {"type": "url", "value": "https://x"}}]),
        "messages[0].content"),
    "a tool message whose content list holds a malformed part": (
        lambda b: b["messages"].insert(0, {"id": "t-0", "role": "tool", "toolCallId": "c-0", "content": [{"type": 1}]}),
        "messages[0].content[0].type"),
}


@pytest.mark.parametrize(("change", "field"), STRICT.values(), ids=STRICT.keys())
async def test_strict_where_the_reference_is_strict(
    adapter: RunningAdapter, workspace: Path, change: Callable[[Body], None], field: str, language: str
) -> None:
    payload = body(workspace)
    change(payload)
    reply = await adapter.run(payload, {"Accept-Language": LANGUAGES[language]})
    expect_error(reply, 400, "INVALID_INPUT", field)


URL_IMAGE: Final = {"type": "image", "source": {"type": "url", "value": "https://example.invalid/a.png"}}
DOCUMENT: Final = {"type": "document", "source": {"type": "file", "value": "file-abc", "provider": "openai"}}


async def test_ag_ui_1_0_runs_on_with_the_parts_it_can_use_and_says_what_it_left_out(
    adapter: RunningAdapter, workspace: Path
) -> None:
    payload = body(workspace)
    payload["messages"][0].update(content=[URL_IMAGE, {"type": "text", "text": "hello", "cache": True}, DOCUMENT])
    events = (await adapter.run(payload)).events()
    assert [e["type"] for e in events[:2]] == ["RUN_STARTED", "CUSTOM"] and events[-1]["type"] == "RUN_FINISHED"
    notice = events[1]
    assert notice["name"] == "iac-code.input.skipped.v1"
    assert notice["value"] == {
        "schemaVersion": 1,
        "messageId": payload["messages"][0]["id"],
        "parts": [
            {"index": 0, "type": "image", "source": "url", "reason": "image_url"},
            {"index": 2, "type": "document", "source": "file", "reason": "unsupported_part"},
        ],
    }
    first_text = next(i for i, e in enumerate(events) if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert first_text > 1 and "hello" in "".join(e.get("delta", "") for e in events)


async def test_the_compat_profile_refuses_a_part_the_runtime_cannot_use(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, language: str
) -> None:
    running = await start_adapter(tmp_path / "compat", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                  profile="iac-code-agui")
    try:
        payload = body(workspace)
        payload["messages"][0].update(content=[{"type": "text", "text": "hello"}, URL_IMAGE])
        reply = await running.run(payload, {"Accept-Language": LANGUAGES[language]})
        expect_error(reply, 400, "INVALID_INPUT", "messages[0].content[1].source.type")
        # Members a part does not describe are ignored in this profile too.
        payload = body(workspace)
        payload["messages"][0].update(content=[{"type": "text", "text": "hello", "cache": True}])
        events = (await running.run(payload)).events()
        assert events[-1]["type"] == "RUN_FINISHED" and all(e.get("name") != "iac-code.input.skipped.v1" for e in events)
    finally:
        await running.close()


async def test_the_thread_of_an_odd_id_stays_a_file_of_the_state_folder(
    adapter: RunningAdapter, workspace: Path, tmp_path: Path
) -> None:
    thread_id = "../../escape\n" + "x" * 300
    assert (await adapter.run(body(workspace, threadId=thread_id))).events()[-1]["type"] == "RUN_FINISHED"
    names = sorted(name for _, _, files in os.walk(tmp_path / "state") for name in files
                   if name.endswith((".json", ".mark")) and name != "deadlines.json")
    # Its record, and its thread list entry of the same stem.
    assert len(names) == 2 and names[0].removesuffix(".json") == names[1].removesuffix(".mark")
    assert all(len(name.encode()) <= 255 and "\n" not in name for name in names)
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()


async def test_an_http_client_sees_json_through_aiohttp_too(adapter: RunningAdapter) -> None:
    """aiohttp's own client (not a raw socket) reads the JSON of a parser refusal."""
    async with aiohttp.ClientSession() as session, session.get(
        adapter.url + "health", headers={"X-Big": "v" * 9000}
    ) as response:
        assert response.status == 431 and (await response.json())["error"]["code"] == "HEADERS_TOO_LARGE"
