"""RunAgentInput as the protocol reference and AG-UI 1.0 describe it, one rule per test.

Strict where the reference is (forwardedProps.iacCode, tools), AG-UI's rules
elsewhere: types checked, members a newer client may add ignored. A content
part the runtime cannot use is skipped under AG-UI 1.0 (the default) and
refused under ``--compat iac-code-agui``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ag_ui.core import RunAgentInput as AgUiRunAgentInput

from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.i18n import render_error
from aguiadapter.protocol.content import ImagePart, TextPart
from aguiadapter.protocol.input_schema import MAX_IDENTIFIER_LENGTH
from aguiadapter.protocol.inputs import (
    AssistantMessage,
    ReasoningMessage,
    RunAgentInput,
    ToolMessage,
    UserMessage,
    latest_user_message,
)
from aguiadapter.protocol.parsing import parse_run_input, peek_preferred_language
from aguiadapter.protocol.profile import Profile
from tests.support.envelopes import (
    GIF,
    JPEG,
    MIB,
    PNG,
    WEBP,
    Mutation,
    Payload,
    b64,
    envelope_0_1,
    envelope_1_0,
    envelope_client_1_0,
    envelope_client_1_0_resume,
    iac,
    iac_code,
    image_part,
    mutated,
)

def refusal(payload: object) -> AdapterError:
    with pytest.raises(AdapterError) as caught:
        parse_run_input(payload)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    return caught.value


# --- accepted envelopes -----------------------------------------------------------

ACCEPTED: dict[str, Callable[[], Payload]] = {
    "0.1 minimal normal request": envelope_0_1,
    "1.0 minimal request": envelope_1_0,
    "@ag-ui/client 1.0 conversation": envelope_client_1_0,
    "@ag-ui/client 1.0 resume": envelope_client_1_0_resume,
    "resume with no new message": lambda: mutated(
        envelope_0_1,
        lambda p: p.update(
            messages=[],
            resume=[{"interruptId": "permission-1", "status": "resolved", "payload": {"a": 1}}],
        ),
    ),
    "every iacCode field": lambda: mutated(
        envelope_0_1,
        lambda p: iac(p).update(
            model="qwen-max",
            llmApiKey="sk-secret",
            thinking={"enabled": True, "effort": "high", "budget": 2048},
            userId="u-1",
            channel="console",
            preferredLanguage="zh-CN",
            candidatePresentation="rich",
            runMode="pipeline",
            pipelineName="selling",
            cleanupOnly=False,
            alibabaCloud={
                "accessKeyId": "LTAI-id",
                "accessKeySecret": "ak-secret",
                "securityToken": "sts-token",
                "regionId": "cn-hangzhou",
            },
        ),
    ),
    "1.0 optional message fields": lambda: mutated(
        envelope_1_0,
        lambda p: p["messages"].extend(
            [
                {
                    "id": "a-1",
                    "role": "assistant",
                    "subagentRunId": "sub-1",
                    "encryptedValue": "opaque",
                    "metadata": {"ag-ui": {}},
                    "toolCalls": [
                        {
                            "id": "c-1",
                            "type": "function",
                            "function": {"name": "f", "arguments": ""},
                            "encryptedValue": "opaque",
                            "metadata": {},
                        }
                    ],
                },
                {
                    "id": "t-1",
                    "role": "tool",
                    "toolCallId": "c-1",
                    "content": [{"type": "text", "text": "partial"}],
                    "error": "timeout",
                },
                {"id": "act-1", "role": "activity", "activityType": "plan", "content": {"s": 1}},
                {"id": "r-1", "role": "reasoning", "content": "", "encryptedValue": "x"},
            ]
        ),
    ),
    "parentRunId, state, context": lambda: mutated(
        envelope_0_1,
        lambda p: p.update(
            parentRunId="run-0",
            state={"anything": [1, "two", None]},
            context=[{"description": "tz", "value": "UTC+8"}],
        ),
    ),
    "other forwardedProps members are ignored": lambda: mutated(
        envelope_0_1, lambda p: p["forwardedProps"].update(command={"resume": "x"}, n=1)
    ),
    "null optional fields": lambda: mutated(
        envelope_0_1, lambda p: p.update(parentRunId=None, resume=None, protocolVersion=None)
    ),
    "null optional iacCode field": lambda: mutated(
        envelope_0_1, lambda p: iac(p).update(model=None, thinking=None)
    ),
    "a thread id of one space": lambda: mutated(envelope_0_1, lambda p: p.update(threadId=" ")),
    "ids with a newline and a tab": lambda: mutated(
        envelope_0_1, lambda p: p.update(threadId="tenant\nthread", runId="run\t1")
    ),
    "a 300-character composite thread id": lambda: mutated(
        envelope_0_1, lambda p: p.update(threadId="tenant-7/" + "k" * 291)
    ),
    "ids of the longest length": lambda: mutated(
        envelope_0_1,
        lambda p: p.update(threadId="t" * MAX_IDENTIFIER_LENGTH, runId="r" * MAX_IDENTIFIER_LENGTH),
    ),
    "a rosInvocationId with a control character": lambda: mutated(
        envelope_0_1, lambda p: iac(p).update(rosInvocationId="inv\x01")
    ),
    "members a newer AG-UI client may add": lambda: mutated(
        envelope_client_1_0,
        lambda p: (
            p.update(futureMember={"x": 1}),
            p["messages"][0].update(thread_id="t-1"),
            p["messages"][-1].update(attachments=[]),
            p["messages"][2]["toolCalls"][0].update(index=0),
            p["context"].append({"description": "d", "value": "v", "source": "app"}),
        ),
    ),
    "an empty text earlier in the history": lambda: mutated(
        envelope_0_1,
        lambda p: p["messages"].insert(0, {"id": "m-0", "role": "user", "content": ""}),
    ),
    "earlier user parts this adapter would not send": lambda: mutated(
        envelope_0_1,
        lambda p: p["messages"].insert(
            0,
            {
                "id": "m-0",
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "url", "value": "https://x/a.png"}},
                    {"type": "audio", "source": {"type": "data", "value": "", "mimeType": "audio/wav"}},
                    {"type": "text", "text": " "},
                ],
            },
        ),
    ),
    "a resume whose history holds an empty user message": lambda: mutated(
        envelope_client_1_0_resume, lambda p: p["messages"][-1].update(content=[])
    ),
    "a blank regionId (no override)": lambda: mutated(
        envelope_0_1, lambda p: iac(p).update(alibabaCloud={"regionId": ""})
    ),
    "a region ID with spaces around it": lambda: mutated(
        envelope_0_1, lambda p: iac(p).update(alibabaCloud={"regionId": " ap-southeast-1 "})
    ),
    "numbers JSON Schema calls integers": lambda: mutated(
        envelope_0_1, lambda p: iac(p).update(schemaVersion=1.0, thinking={"budget": 2048.0})
    ),
    "every image type": lambda: mutated(
        envelope_0_1,
        lambda p: p["messages"][0].update(
            content=[
                image_part(PNG, "image/png"),
                image_part(JPEG, "image/jpeg"),
                image_part(GIF, "image/gif"),
                image_part(WEBP, "IMAGE/WEBP"),
            ]
        ),
    ),
}


@pytest.mark.parametrize("make", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_accepted_envelopes_parse(make: Callable[[], Payload]) -> None:
    assert isinstance(parse_run_input(make()), RunAgentInput)


@pytest.mark.parametrize("make", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_accepted_envelopes_are_valid_ag_ui_1_0(make: Callable[[], Payload]) -> None:
    AgUiRunAgentInput.model_validate(make())


def test_a_1_0_envelope_gets_the_1_0_defaults() -> None:
    run_input = parse_run_input(envelope_1_0())
    assert run_input.state == {}
    assert run_input.tools == ()
    assert run_input.context == ()
    assert run_input.resume is None
    assert run_input.protocol_version == "1.0"
    assert not run_input.is_resume


def test_the_client_conversation_is_structured_by_role() -> None:
    run_input = parse_run_input(envelope_client_1_0())
    kinds = [type(message) for message in run_input.messages]
    assert kinds[:4] == [UserMessage, ReasoningMessage, AssistantMessage, ToolMessage]
    assistant = run_input.messages[2]
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls
    assert assistant.tool_calls[0].function.arguments == '{"op":"list"}'
    assert run_input.iac_code.preferred_language == "zh-CN"
    assert run_input.iac_code.user_id == "user-7"


def test_the_resume_entries_are_kept() -> None:
    run_input = parse_run_input(envelope_client_1_0_resume())
    assert run_input.is_resume
    assert run_input.resume is not None
    assert [(entry.interrupt_id, entry.status) for entry in run_input.resume] == [
        ("permission-1", "resolved"),
        ("question-1", "cancelled"),
    ]
    assert run_input.resume[0].payload == {"decision": "allow_once"}
    assert run_input.resume[1].payload is None


def test_the_latest_user_message_is_the_last_one_with_role_user() -> None:
    run_input = parse_run_input(envelope_client_1_0())
    message = latest_user_message(run_input)
    assert message is not None and message.id == "u-2"
    assert message.text == "Deploy this"


def test_a_resume_sends_no_message() -> None:
    assert latest_user_message(parse_run_input(envelope_client_1_0_resume())) is None


def test_earlier_messages_are_kept_as_the_client_sent_them() -> None:
    payload = ACCEPTED["earlier user parts this adapter would not send"]()
    run_input = parse_run_input(payload)
    first = run_input.messages[0]
    assert isinstance(first, UserMessage)
    assert first.content == tuple(payload["messages"][0]["content"])
    message = latest_user_message(run_input)
    assert message is not None and message.text == "创建一个 VPC 模板"


def test_a_member_the_client_adds_is_not_kept() -> None:
    run_input = parse_run_input(ACCEPTED["members a newer AG-UI client may add"]())
    assert not hasattr(run_input, "future_member") and not hasattr(run_input.messages[0], "thread_id")


def test_the_checked_message_cannot_be_sent_ready_made() -> None:
    """``new_user_message`` is computed, never read from the request."""
    payload = mutated(envelope_client_1_0_resume, lambda p: p.update(newUserMessage={"id": "x", "content": "hi"}))
    assert latest_user_message(parse_run_input(payload)) is None


def test_integers_written_as_floats_are_stored_as_integers() -> None:
    run_input = parse_run_input(ACCEPTED["numbers JSON Schema calls integers"]())
    assert run_input.iac_code.thinking is not None
    assert type(run_input.iac_code.schema_version) is int and type(run_input.iac_code.thinking.budget) is int


def test_decoded_images_are_handed_to_the_caller() -> None:
    message = latest_user_message(parse_run_input(envelope_client_1_0()))
    assert message is not None and not isinstance(message.content, str)
    text, image = message.content
    assert isinstance(text, TextPart) and isinstance(image, ImagePart)
    assert image.data == PNG
    assert image.media_type == "image/png"
    assert image.source.value == b64(PNG)


def test_the_mime_type_is_compared_without_case() -> None:
    message = latest_user_message(parse_run_input(ACCEPTED["every image type"]()))
    assert message is not None and not isinstance(message.content, str)
    assert [part.media_type for part in message.content if isinstance(part, ImagePart)] == [
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
    ]


@pytest.mark.parametrize(
    "mutation",
    [
        lambda p: p.update(messages=[]),
        lambda p: p.update(messages=[{"id": "a-1", "role": "assistant", "content": "hi"}], resume=[]),
        lambda p: p.update(messages=[], resume=None),
    ],
)
def test_a_new_run_needs_a_user_message(mutation: Mutation) -> None:
    error = refusal(mutated(envelope_0_1, mutation))
    assert (error.message_id, error.params["path"]) == ("input_user_message_required", "messages")
    assert render_error(error, "en") == "A new run needs a user message in messages."
    assert render_error(error, "zh-CN") == "发起新的 run 时，messages 中必须包含一条用户消息。"


# --- refusals: (base, mutation, path, message id) --------------------------------

REFUSED: dict[str, tuple[Callable[[], Payload], Mutation, str, str]] = {
    "missing threadId": (
        envelope_0_1,
        lambda p: p.pop("threadId"),
        "threadId",
        "input_field_missing",
    ),
    "missing runId": (envelope_1_0, lambda p: p.pop("runId"), "runId", "input_field_missing"),
    "missing messages": (
        envelope_1_0,
        lambda p: p.pop("messages"),
        "messages",
        "input_field_missing",
    ),
    "missing forwardedProps": (
        envelope_1_0,
        lambda p: p.pop("forwardedProps"),
        "forwardedProps",
        "input_field_missing",
    ),
    "forwardedProps without iacCode": (
        envelope_1_0,
        lambda p: p.update(forwardedProps={}),
        "forwardedProps.iacCode",
        "input_field_missing",
    ),
    "forwardedProps not an object": (
        envelope_1_0,
        lambda p: p.update(forwardedProps=[]),
        "forwardedProps",
        "input_expected_object",
    ),
    "unknown iacCode key needing quotes": (
        envelope_1_0,
        lambda p: iac(p).update({"a b": 1}),
        'forwardedProps.iacCode["a b"]',
        "input_unknown_field",
    ),
    "empty threadId": (
        envelope_0_1,
        lambda p: p.update(threadId=""),
        "threadId",
        "input_string_empty",
    ),
    "empty runId": (envelope_0_1, lambda p: p.update(runId=""), "runId", "input_string_empty"),
    "threadId too long": (
        envelope_0_1,
        lambda p: p.update(threadId="t" * (MAX_IDENTIFIER_LENGTH + 1)),
        "threadId",
        "input_string_too_long",
    ),
    "numeric threadId": (
        envelope_0_1,
        lambda p: p.update(threadId=42),
        "threadId",
        "input_expected_string",
    ),
    "messages not an array": (
        envelope_0_1,
        lambda p: p.update(messages="hello"),
        "messages",
        "input_expected_array",
    ),
    "state stays any JSON but tools must be empty": (
        envelope_0_1,
        lambda p: p.update(tools=[{"name": "t", "description": "d", "parameters": {}}]),
        "tools",
        "input_tools_unsupported",
    ),
    "tools not an array": (
        envelope_0_1,
        lambda p: p.update(tools={}),
        "tools",
        "input_expected_array",
    ),
    "context entry without value": (
        envelope_0_1,
        lambda p: p.update(context=[{"description": "d"}]),
        "context[0].value",
        "input_field_missing",
    ),
    "unknown message role": (
        envelope_0_1,
        lambda p: p["messages"].append({"id": "x", "role": "bot", "content": "hi"}),
        "messages[1].role",
        "input_bad_value",
    ),
    "message without role": (
        envelope_0_1,
        lambda p: p["messages"].append({"id": "x", "content": "hi"}),
        "messages[1].role",
        "input_field_missing",
    ),
    "message that is not an object": (
        envelope_0_1,
        lambda p: p["messages"].append("hi"),
        "messages[1]",
        "input_expected_object",
    ),
    "history message of the wrong shape": (
        envelope_client_1_0,
        lambda p: p["messages"][4].update(content=["You have no stacks."]),
        "messages[4].content",
        "input_expected_string",
    ),
    "history user content of the wrong type": (
        envelope_client_1_0,
        lambda p: p["messages"][0].update(content=7),
        "messages[0].content",
        "input_expected_string_or_array",
    ),
    "empty id of the new message": (
        envelope_0_1,
        lambda p: p["messages"][0].update(id=""),
        "messages[0].id",
        "input_string_empty",
    ),
    "tool call arguments not a string": (
        envelope_client_1_0,
        lambda p: p["messages"][2]["toolCalls"][0]["function"].update(arguments={"op": "list"}),
        "messages[2].toolCalls[0].function.arguments",
        "input_expected_string",
    ),
    "tool call of another type": (
        envelope_client_1_0,
        lambda p: p["messages"][2]["toolCalls"][0].update(type="retrieval"),
        "messages[2].toolCalls[0].type",
        "input_bad_value",
    ),
    "tool message without toolCallId": (
        envelope_client_1_0,
        lambda p: p["messages"][3].pop("toolCallId"),
        "messages[3].toolCallId",
        "input_field_missing",
    ),
    "resume entry with an unknown status": (
        envelope_client_1_0_resume,
        lambda p: p["resume"][1].update(status="rejected"),
        "resume[1].status",
        "input_bad_value",
    ),
    "resume entry without interruptId": (
        envelope_client_1_0_resume,
        lambda p: p["resume"][0].pop("interruptId"),
        "resume[0].interruptId",
        "input_field_missing",
    ),
    "resume not an array": (
        envelope_client_1_0_resume,
        lambda p: p.update(resume={}),
        "resume",
        "input_expected_array",
    ),
    "protocolVersion not a string": (
        envelope_1_0,
        lambda p: p.update(protocolVersion=1.0),
        "protocolVersion",
        "input_expected_string",
    ),
    # forwardedProps.iacCode
    "unknown iacCode field": (
        envelope_0_1,
        lambda p: iac(p).update(workspace="/x"),
        "forwardedProps.iacCode.workspace",
        "input_unknown_field",
    ),
    "missing schemaVersion": (
        envelope_0_1,
        lambda p: iac(p).pop("schemaVersion"),
        "forwardedProps.iacCode.schemaVersion",
        "input_field_missing",
    ),
    "schemaVersion 2": (
        envelope_0_1,
        lambda p: iac(p).update(schemaVersion=2),
        "forwardedProps.iacCode.schemaVersion",
        "input_bad_value",
    ),
    "missing rosInvocationId": (
        envelope_0_1,
        lambda p: iac(p).pop("rosInvocationId"),
        "forwardedProps.iacCode.rosInvocationId",
        "input_field_missing",
    ),
    "rosInvocationId of 257 characters": (
        envelope_0_1,
        lambda p: iac(p).update(rosInvocationId="i" * 257),
        "forwardedProps.iacCode.rosInvocationId",
        "input_string_too_long",
    ),
    "missing cwd": (
        envelope_0_1,
        lambda p: iac(p).pop("cwd"),
        "forwardedProps.iacCode.cwd",
        "input_field_missing",
    ),
    "runMode unknown": (
        envelope_0_1,
        lambda p: iac(p).update(runMode="batch"),
        "forwardedProps.iacCode.runMode",
        "input_bad_value",
    ),
    "candidatePresentation unknown": (
        envelope_0_1,
        lambda p: iac(p).update(candidatePresentation="fancy"),
        "forwardedProps.iacCode.candidatePresentation",
        "input_bad_value",
    ),
    "unknown thinking field": (
        envelope_0_1,
        lambda p: iac(p).update(thinking={"level": 3}),
        "forwardedProps.iacCode.thinking.level",
        "input_unknown_field",
    ),
    "unknown alibabaCloud field": (
        envelope_0_1,
        lambda p: iac(p).update(alibabaCloud={"endpoint": "x"}),
        "forwardedProps.iacCode.alibabaCloud.endpoint",
        "input_unknown_field",
    ),
    "llmApiKey not a string": (
        envelope_0_1,
        lambda p: iac(p).update(llmApiKey=12345),
        "forwardedProps.iacCode.llmApiKey",
        "input_expected_string",
    ),
    "llmApiKey not ASCII": (
        envelope_0_1,
        lambda p: iac(p).update(llmApiKey="sk-été"),
        "forwardedProps.iacCode.llmApiKey",
        "input_credential_not_ascii",
    ),
    "a 3 MB llmApiKey": (
        envelope_0_1,
        lambda p: iac(p).update(llmApiKey="k" * 3_000_000),
        "forwardedProps.iacCode.llmApiKey",
        "input_credential_too_long",
    ),
    "a securityToken over 4096 characters": (
        envelope_0_1,
        lambda p: iac(p).update(alibabaCloud={"securityToken": "s" * 4097}),
        "forwardedProps.iacCode.alibabaCloud.securityToken",
        "input_credential_too_long",
    ),
    "accessKeySecret with a newline": (
        envelope_0_1,
        lambda p: iac(p).update(alibabaCloud={"accessKeySecret": "ak\nX-Injected: 1"}),
        "forwardedProps.iacCode.alibabaCloud.accessKeySecret",
        "input_credential_not_ascii",
    ),
    "securityToken with a DEL": (
        envelope_0_1,
        lambda p: iac(p).update(alibabaCloud={"securityToken": "sts\x7f"}),
        "forwardedProps.iacCode.alibabaCloud.securityToken",
        "input_credential_not_ascii",
    ),
    "accessKeyId with a non-breaking space": (
        envelope_0_1,
        lambda p: iac(p).update(alibabaCloud={"accessKeyId": "LTAI\u00a0x"}),
        "forwardedProps.iacCode.alibabaCloud.accessKeyId",
        "input_credential_not_ascii",
    ),
    "regionId that is not a region ID": (
        envelope_0_1,
        lambda p: iac(p).update(alibabaCloud={"regionId": "cn_hangzhou"}),
        "forwardedProps.iacCode.alibabaCloud.regionId",
        "input_region_id_invalid",
    ),
    "regionId in upper case": (
        envelope_0_1,
        lambda p: iac(p).update(alibabaCloud={"regionId": "CN-HANGZHOU"}),
        "forwardedProps.iacCode.alibabaCloud.regionId",
        "input_region_id_invalid",
    ),
    "rosInvocationId empty": (
        envelope_0_1,
        lambda p: iac(p).update(rosInvocationId=""),
        "forwardedProps.iacCode.rosInvocationId",
        "input_string_empty",
    ),
    "iacCode not an object": (
        envelope_0_1,
        lambda p: p["forwardedProps"].update(iacCode="v1"),
        "forwardedProps.iacCode",
        "input_expected_object",
    ),
    # user message content
    "empty user text": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=" "),
        "messages[0].content",
        "input_user_content_empty",
    ),
    "no user parts": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[]),
        "messages[0].content",
        "input_user_content_empty",
    ),
    "user content of the wrong type": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content={"text": "hi"}),
        "messages[0].content",
        "input_user_content_type",
    ),
    "user message without content": (
        envelope_0_1,
        lambda p: p["messages"][0].pop("content"),
        "messages[0].content",
        "input_field_missing",
    ),
    "text part without text": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[{"type": "text"}]),
        "messages[0].content[0].text",
        "input_field_missing",
    ),
    "part without type": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[{"text": "hi"}]),
        "messages[0].content[0].type",
        "input_field_missing",
    ),
    "image that is not base64": (
        envelope_0_1,
        lambda p: p["messages"][0].update(
            content=[
                {
                    "type": "image",
                    "source": {"type": "data", "value": "not base64!", "mimeType": "image/png"},
                }
            ]
        ),
        "messages[0].content[0].source.value",
        "input_image_bad_base64",
    ),
    "image as a data URL": (
        envelope_0_1,
        lambda p: p["messages"][0].update(
            content=[
                {
                    "type": "image",
                    "source": {
                        "type": "data",
                        "value": "data:image/png;base64," + b64(PNG),
                        "mimeType": "image/png",
                    },
                }
            ]
        ),
        "messages[0].content[0].source.value",
        "input_image_bad_base64",
    ),
    "image whose bytes are not the declared type": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[image_part(JPEG, "image/png")]),
        "messages[0].content[0].source.value",
        "input_image_content_mismatch",
    ),
    "image source without mimeType": (
        envelope_0_1,
        lambda p: p["messages"][0].update(
            content=[{"type": "image", "source": {"type": "data", "value": b64(PNG)}}]
        ),
        "messages[0].content[0].source.mimeType",
        "input_field_missing",
    ),
}


#: What the ``iac-code-agui`` profile refuses where AG-UI 1.0 skips the part and goes on.
COMPAT_REFUSED: dict[str, tuple[Callable[[], Payload], Mutation, str, str]] = {
    "part of an unknown type": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[{"type": "sticker"}]),
        "messages[0].content[0].type",
        "input_bad_value",
    ),
    "audio part": (
        envelope_0_1,
        lambda p: p["messages"][0].update(
            content=[
                {"type": "audio", "source": {"type": "data", "value": "", "mimeType": "audio/wav"}}
            ]
        ),
        "messages[0].content[0].type",
        "input_content_part_unsupported",
    ),
    "video part": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[{"type": "video"}]),
        "messages[0].content[0].type",
        "input_content_part_unsupported",
    ),
    "document part": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[{"type": "document"}]),
        "messages[0].content[0].type",
        "input_content_part_unsupported",
    ),
    "legacy binary part": (
        envelope_0_1,
        lambda p: p["messages"][0].update(
            content=[{"type": "binary", "mimeType": "image/png", "data": b64(PNG)}]
        ),
        "messages[0].content[0].type",
        "input_content_part_unsupported",
    ),
    "image by URL": (
        envelope_0_1,
        lambda p: p["messages"][0].update(
            content=[{"type": "image", "source": {"type": "url", "value": "https://x/a.png"}}]
        ),
        "messages[0].content[0].source.type",
        "input_image_source_unsupported",
    ),
    "image by provider file": (
        envelope_0_1,
        lambda p: p["messages"][0].update(
            content=[{"type": "image", "source": {"type": "file", "value": "file-abc"}}]
        ),
        "messages[0].content[0].source.type",
        "input_image_source_unsupported",
    ),
    "image of an unsupported type": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[image_part(b"BM....", "image/bmp")]),
        "messages[0].content[0].source.mimeType",
        "input_image_type_unsupported",
    ),
}


@pytest.mark.parametrize(
    ("base", "mutation", "path", "message_id"), REFUSED.values(), ids=REFUSED.keys()
)
def test_refusals_name_the_field_by_its_json_path(
    base: Callable[[], Payload], mutation: Mutation, path: str, message_id: str
) -> None:
    error = refusal(mutated(base, mutation))
    assert (error.message_id, error.params["path"]) == (message_id, path)
    english, chinese = render_error(error, "en"), render_error(error, "zh-CN")
    assert path in english and path in chinese
    assert english != chinese
    assert "{" not in english and "{" not in chinese  # every placeholder was filled


@pytest.mark.parametrize(
    ("base", "mutation", "path", "message_id"), COMPAT_REFUSED.values(), ids=COMPAT_REFUSED.keys()
)
def test_the_compat_profile_refuses_a_part_the_runtime_cannot_use(
    base: Callable[[], Payload], mutation: Mutation, path: str, message_id: str
) -> None:
    with pytest.raises(AdapterError) as caught:
        parse_run_input(mutated(base, mutation), Profile.IAC_CODE_AGUI)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert (caught.value.message_id, caught.value.params["path"]) == (message_id, path)


#: Parts AG-UI 1.0 describes (or a newer version may add) that the runtime cannot take,
#: and how ``iac-code.input.skipped.v1`` names each.
UNUSABLE: dict[str, tuple[Payload, Payload]] = {
    "an image by URL": (
        {"type": "image", "source": {"type": "url", "value": "https://x/a.png", "mimeType": "image/png"}},
        {"type": "image", "source": "url", "reason": "image_url", "mimeType": "image/png"},
    ),
    "an image as a provider file handle": (
        {"type": "image", "id": "p-1", "source": {"type": "file", "value": "file-abc", "provider": "openai"}},
        {"type": "image", "source": "file", "reason": "provider_file", "id": "p-1"},
    ),
    "a document": (
        {"type": "document", "source": {"type": "data", "value": b64(b"%PDF-1.4"), "mimeType": "application/pdf"}},
        {"type": "document", "source": "data", "reason": "unsupported_part", "mimeType": "application/pdf"},
    ),
    "an audio clip by URL": (
        {"type": "audio", "source": {"type": "url", "value": "https://x/a.wav"}},
        {"type": "audio", "source": "url", "reason": "unsupported_part"},
    ),
    "an inline image of a type the runtime does not read": (
        image_part(b"BM....", "image/bmp"),
        {"type": "image", "source": "data", "reason": "unsupported_image_type", "mimeType": "image/bmp"},
    ),
    "an image from a source kind AG-UI 1.0 does not describe": (
        {"type": "image", "source": {"type": "blob", "ref": "x"}},
        {"type": "image", "source": "blob", "reason": "unsupported_source"},
    ),
    "a part of a type AG-UI 1.0 does not describe": (
        {"type": "sticker", "pack": "cats"},
        {"type": "sticker", "reason": "unsupported_part"},
    ),
}


@pytest.mark.parametrize(("part", "named"), UNUSABLE.values(), ids=UNUSABLE.keys())
def test_ag_ui_1_0_skips_a_part_the_runtime_cannot_use_and_keeps_the_rest(part: Payload, named: Payload) -> None:
    message = parse_run_input(with_parts({"type": "text", "text": "look"}, part, image_part(PNG))).new_user_message
    assert message is not None
    assert [type(kept) for kept in message.content] == [TextPart, ImagePart]
    assert [skipped.describe() for skipped in message.skipped] == [{"index": 1, **named}]


@pytest.mark.parametrize(("part", "named"), UNUSABLE.values(), ids=UNUSABLE.keys())
def test_a_message_left_with_nothing_usable_is_still_invalid_input(part: Payload, named: Payload) -> None:
    error = refusal(with_parts(part, {"type": "text", "text": "  "}))
    assert (error.message_id, error.params["path"]) == ("input_user_content_unusable", "messages[0].content")
    english, chinese = render_error(error, "en"), render_error(error, "zh-CN")
    assert f"{named['type']} ({named['reason']})" in english and "{" not in english + chinese


@pytest.mark.parametrize("profile", list(Profile))
def test_members_a_content_part_does_not_describe_are_ignored(profile: Profile) -> None:
    text = {"type": "text", "text": "hi", "lang": "en"}
    image = {"type": "image", "source": {**image_part(PNG)["source"], "filename": "a.png"}, "alt": "a dot"}
    message = parse_run_input(with_parts(text, image), profile).new_user_message
    assert message is not None and message.text == "hi" and message.skipped == ()
    assert [type(kept) for kept in message.content] == [TextPart, ImagePart]


#: A member AG-UI 1.0 describes, of the wrong type, anywhere in messages: malformed in every profile.
MALFORMED: dict[str, tuple[Callable[[], Payload], Mutation, str, str]] = {
    "the URL of an image that is not a string": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[{"type": "image", "source": {"type": "url", "value": 5}}]),
        "messages[0].content[0].source.value",
        "input_expected_string",
    ),
    "a document without its source": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[{"type": "text", "text": "hi"}, {"type": "document"}]),
        "messages[0].content[1].source",
        "input_field_missing",
    ),
    "a text part whose text is a number": (
        envelope_0_1,
        lambda p: p["messages"][0].update(content=[{"type": "text", "text": 5}]),
        "messages[0].content[0].text",
        "input_expected_string",
    ),
    "a tool message whose content list holds a malformed part": (
        envelope_client_1_0,
        lambda p: p["messages"][3].update(content=[{"type": "text", "text": ["[]"]}]),
        "messages[3].content[0].text",
        "input_expected_string",
    ),
    "a tool message whose content list holds a string": (
        envelope_client_1_0,
        lambda p: p["messages"][3].update(content=["[]"]),
        "messages[3].content[0]",
        "input_expected_object",
    ),
    "a tool message whose content list holds a part without a type": (
        envelope_client_1_0,
        lambda p: p["messages"][3].update(content=[{"text": "[]"}]),
        "messages[3].content[0].type",
        "input_field_missing",
    ),
    "an earlier user message whose file handle names its provider by a number": (
        envelope_client_1_0,
        lambda p: p["messages"].insert(0, {"id": "u-0", "role": "user", "content": [
            {"type": "image", "source": {"type": "file", "value": "file-1", "provider": 7}}]}),
        "messages[0].content[0].source.provider",
        "input_expected_string",
    ),
    "a resume whose history holds a media part of the wrong shape": (
        envelope_client_1_0_resume,
        lambda p: p["messages"][-1].update(content=[{"type": "video", "source": "https://x/v.mp4"}]),
        f"messages[{len(envelope_client_1_0_resume()['messages']) - 1}].content[0].source",
        "input_expected_object",
    ),
}


@pytest.mark.parametrize("profile", list(Profile))
@pytest.mark.parametrize(("base", "mutation", "path", "message_id"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_described_member_of_the_wrong_type_is_malformed_in_every_profile(
    base: Callable[[], Payload], mutation: Mutation, path: str, message_id: str, profile: Profile
) -> None:
    with pytest.raises(AdapterError) as caught:
        parse_run_input(mutated(base, mutation), profile)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    if profile is Profile.AGUI_1_0:
        # (The reference's profile may name an earlier fault of the same part: its unsupported kind.)
        assert (caught.value.message_id, caught.value.params["path"]) == (message_id, path)


def test_a_tool_message_may_carry_ag_ui_1_0_content_parts() -> None:
    parts = [{"type": "text", "text": "[]"}, {"type": "image", "source": {"type": "url", "value": "https://x/p.png"}}]
    run_input = parse_run_input(mutated(envelope_client_1_0, lambda p: p["messages"][3].update(content=parts)))
    tool = run_input.messages[3]
    assert isinstance(tool, ToolMessage) and tool.content == tuple(parts)


def test_a_refusal_reads_naturally_in_both_languages() -> None:
    error = refusal(mutated(envelope_0_1, lambda p: iac(p).update(thinking={"budget": 0})))
    assert render_error(error, "en") == (
        "forwardedProps.iacCode.thinking.budget must be a positive integer."
    )
    assert render_error(error, "zh-CN") == "forwardedProps.iacCode.thinking.budget 必须是正整数。"


def test_an_unknown_field_reads_naturally_in_both_languages() -> None:
    error = refusal(mutated(envelope_0_1, lambda p: iac(p).update(workspace="/x")))
    assert render_error(error, "en") == "Unknown field forwardedProps.iacCode.workspace."
    assert render_error(error, "zh-CN") == "不支持的字段 forwardedProps.iacCode.workspace。"


@pytest.mark.parametrize("body", [[], "text", 42, None, True, [envelope_0_1()]])
def test_a_body_that_is_not_an_object_is_invalid_input(body: object) -> None:
    error = refusal(body)
    assert error.message_id == "input_not_object"
    assert render_error(error, "en") == "The request body must be a JSON object."


def test_the_first_error_in_document_order_is_reported() -> None:
    payload = envelope_0_1()
    payload["messages"] = [
        {"id": "m-1", "role": "assistant", "content": 5},
        {"id": "m-2", "role": "user", "content": [{"type": "audio"}]},
    ]
    iac(payload)["runMode"] = "batch"
    payload["threadId"] = 7
    assert refusal(payload).params["path"] == "threadId"
    payload["threadId"] = "t"
    assert refusal(payload).params["path"] == "messages[0].content"
    payload["messages"][0]["content"] = "fine"
    # An audio part without its source is malformed (AG-UI 1.0 requires the source).
    assert refusal(payload).params["path"] == "messages[1].content[0].source"


def test_document_order_follows_the_keys_as_written() -> None:
    payload = {
        "forwardedProps": {"iacCode": iac_code(runMode="batch")},
        "threadId": 7,
        "runId": "r",
        "messages": [],
    }
    assert refusal(payload).params["path"] == "forwardedProps.iacCode.runMode"


def test_a_missing_field_is_reported_after_the_errors_of_present_ones() -> None:
    payload = envelope_1_0()
    del payload["runId"]
    payload["messages"] = "hello"
    assert refusal(payload).params["path"] == "messages"


# --- no silent coercion -------------------------------------------------------------

NO_COERCION: dict[str, tuple[Mutation, str, str]] = {
    '"schemaVersion": "1"': (
        lambda p: iac(p).update(schemaVersion="1"),
        "forwardedProps.iacCode.schemaVersion",
        "input_bad_value",
    ),
    '"schemaVersion": true': (
        lambda p: iac(p).update(schemaVersion=True),
        "forwardedProps.iacCode.schemaVersion",
        "input_bad_value",
    ),
    '"cleanupOnly": "true"': (
        lambda p: iac(p).update(cleanupOnly="true"),
        "forwardedProps.iacCode.cleanupOnly",
        "input_expected_boolean",
    ),
    '"cleanupOnly": 1': (
        lambda p: iac(p).update(cleanupOnly=1),
        "forwardedProps.iacCode.cleanupOnly",
        "input_expected_boolean",
    ),
    '"budget": 1.5': (
        lambda p: iac(p).update(thinking={"budget": 1.5}),
        "forwardedProps.iacCode.thinking.budget",
        "input_expected_integer",
    ),
    '"budget": true': (
        lambda p: iac(p).update(thinking={"budget": True}),
        "forwardedProps.iacCode.thinking.budget",
        "input_expected_integer",
    ),
    '"budget": "1024"': (
        lambda p: iac(p).update(thinking={"budget": "1024"}),
        "forwardedProps.iacCode.thinking.budget",
        "input_expected_integer",
    ),
    '"budget": 0': (
        lambda p: iac(p).update(thinking={"budget": 0}),
        "forwardedProps.iacCode.thinking.budget",
        "input_integer_not_positive",
    ),
    '"budget": -1': (
        lambda p: iac(p).update(thinking={"budget": -1}),
        "forwardedProps.iacCode.thinking.budget",
        "input_integer_not_positive",
    ),
    '"enabled": "yes"': (
        lambda p: iac(p).update(thinking={"enabled": "yes"}),
        "forwardedProps.iacCode.thinking.enabled",
        "input_expected_boolean",
    ),
    '"cwd": 5': (
        lambda p: iac(p).update(cwd=5),
        "forwardedProps.iacCode.cwd",
        "input_expected_string",
    ),
    '"rosInvocationId": 1': (
        lambda p: iac(p).update(rosInvocationId=1),
        "forwardedProps.iacCode.rosInvocationId",
        "input_expected_string",
    ),
    '"runId": 1': (lambda p: p.update(runId=1), "runId", "input_expected_string"),
    '"content": 5': (
        lambda p: p["messages"][0].update(content=5),
        "messages[0].content",
        "input_user_content_type",
    ),
    '"text": ["a"]': (
        lambda p: p["messages"][0].update(content=[{"type": "text", "text": ["a"]}]),
        "messages[0].content[0].text",
        "input_expected_string",
    ),
    '"messages": {"0": ...}': (
        lambda p: p.update(messages={"0": p["messages"][0]}),
        "messages",
        "input_expected_array",
    ),
}


@pytest.mark.parametrize(
    ("mutation", "path", "message_id"), NO_COERCION.values(), ids=NO_COERCION.keys()
)
def test_values_are_never_coerced(mutation: Mutation, path: str, message_id: str) -> None:
    error = refusal(mutated(envelope_0_1, mutation))
    assert (error.message_id, error.params["path"]) == (message_id, path)


# --- images ---------------------------------------------------------------------------


def png_of_size(size: int) -> bytes:
    return PNG + b"\x00" * (size - len(PNG))


def with_parts(*parts: Payload) -> Payload:
    return mutated(envelope_0_1, lambda p: p["messages"][0].update(content=list(parts)))


def test_a_good_png_is_accepted() -> None:
    message = latest_user_message(parse_run_input(with_parts(image_part(PNG))))
    assert message is not None and not isinstance(message.content, str)
    assert isinstance(message.content[0], ImagePart) and message.content[0].data == PNG


def test_an_image_of_exactly_8_mib_is_accepted() -> None:
    parse_run_input(with_parts(image_part(png_of_size(8 * MIB))))


def test_an_image_over_8_mib_is_refused() -> None:
    error = refusal(with_parts(image_part(png_of_size(8 * MIB + 1))))
    assert error.message_id == "input_image_too_large"
    assert error.params["path"] == "messages[0].content[0].source.value"
    assert render_error(error, "en").endswith("larger than 8 MiB once decoded.")
    assert "8 MiB" in render_error(error, "zh-CN")


def test_images_over_10_mib_in_total_are_refused_at_the_part_that_crosses() -> None:
    error = refusal(
        with_parts(
            {"type": "text", "text": "two photos"},
            image_part(png_of_size(5 * MIB)),
            image_part(png_of_size(5 * MIB)),
            image_part(png_of_size(1)),
        )
    )
    assert error.message_id == "input_images_total_too_large"
    assert error.params["path"] == "messages[0].content[3]"
    assert "10 MiB" in render_error(error, "en") and "10 MiB" in render_error(error, "zh-CN")


def test_images_of_exactly_10_mib_in_total_are_accepted() -> None:
    parse_run_input(with_parts(image_part(png_of_size(5 * MIB)), image_part(png_of_size(5 * MIB))))


def test_the_image_limit_is_per_message() -> None:
    payload = with_parts(image_part(png_of_size(6 * MIB)))
    payload["messages"].append(
        {"id": "m-2", "role": "user", "content": [image_part(png_of_size(6 * MIB))]}
    )
    parse_run_input(payload)


@pytest.mark.parametrize(
    ("data", "mime_type"),
    [
        (GIF, "image/png"),
        (PNG, "image/jpeg"),
        (JPEG, "image/gif"),
        (b"RIFF\x00\x00\x00\x00WAVE", "image/webp"),
        (b"", "image/png"),
    ],
)
def test_the_bytes_must_match_the_declared_type(data: bytes, mime_type: str) -> None:
    error = refusal(with_parts(image_part(data, mime_type)))
    assert error.message_id == "input_image_content_mismatch"
    assert error.params["mime_type"] == mime_type


DAMAGED = {
    "a PNG cut inside a chunk": (PNG[:-20], "image/png"),
    "a PNG whose chunk fails its CRC": (PNG[:-17] + b"\x00" + PNG[-16:], "image/png"),
    "a JPEG cut before its end marker": (JPEG[:-2], "image/jpeg"),
    "a JPEG cut in half": (JPEG[: len(JPEG) // 2], "image/jpeg"),
    "a WebP shorter than its RIFF header says": (WEBP[:-1], "image/webp"),
}


@pytest.mark.parametrize(("data", "mime_type"), DAMAGED.values(), ids=DAMAGED.keys())
def test_an_image_cut_short_or_damaged_is_refused(data: bytes, mime_type: str) -> None:
    """The runtime decodes every image and fails the run on one it cannot read."""
    error = refusal(with_parts(image_part(data, mime_type)))
    assert (error.message_id, error.params["path"]) == ("input_image_damaged", "messages[0].content[0].source.value")
    assert mime_type in render_error(error, "en") and mime_type in render_error(error, "zh-CN")


WHOLE_ENOUGH = {
    "a PNG without its IEND chunk": (PNG[:-12], "image/png"),
    "a PNG followed by other bytes": (PNG + b"trailer", "image/png"),
    "a JPEG followed by other bytes": (JPEG + b"trailer", "image/jpeg"),
    "a GIF without its trailer": (GIF[:-1], "image/gif"),
}


@pytest.mark.parametrize(("data", "mime_type"), WHOLE_ENOUGH.values(), ids=WHOLE_ENOUGH.keys())
def test_images_decoders_read_are_accepted(data: bytes, mime_type: str) -> None:
    parse_run_input(with_parts(image_part(data, mime_type)))


@pytest.mark.parametrize("value", ["iVBORw0KGgo", "iVBO Rw0K", "iVBORw0K\n", "-_-_"])
def test_the_base64_must_be_strict(value: str) -> None:
    payload = with_parts(
        {"type": "image", "source": {"type": "data", "value": value, "mimeType": "image/png"}}
    )
    assert refusal(payload).message_id == "input_image_bad_base64"


# --- secrets stay out of repr --------------------------------------------------------------


def test_secrets_are_not_in_repr() -> None:
    run_input = parse_run_input(ACCEPTED["every iacCode field"]())
    text = repr(run_input) + str(run_input)
    for secret in ("sk-secret", "LTAI-id", "ak-secret", "sts-token"):
        assert secret not in text
    assert "cn-hangzhou" in text  # the region is not a secret
    assert run_input.iac_code.llm_api_key == "sk-secret"
    assert run_input.iac_code.alibaba_cloud is not None
    assert run_input.iac_code.alibaba_cloud.security_token == "sts-token"


def test_image_bytes_are_not_in_repr() -> None:
    text = repr(parse_run_input(envelope_client_1_0()))
    assert b64(PNG) not in text and "IHDR" not in text


@pytest.mark.parametrize("secret", [["sk-leak"], "sk-leak-été", "sk-leak\n"])
def test_a_refused_secret_is_not_echoed(secret: object) -> None:
    error = refusal(mutated(envelope_0_1, lambda p: iac(p).update(llmApiKey=secret)))
    for language in ("en", "zh-CN"):
        assert "leak" not in render_error(error, language) + str(error) + repr(error.params)


# --- peeking at the language of an invalid body ----------------------------------------------


@pytest.mark.parametrize(
    ("payload", "language"),
    [
        ({"forwardedProps": {"iacCode": {"preferredLanguage": "zh-CN"}}}, "zh-CN"),
        (
            {"forwardedProps": {"iacCode": {"preferredLanguage": "zh-CN", "bogus": 1}}, "x": 1},
            "zh-CN",
        ),
        ({"forwardedProps": {"iacCode": {"preferredLanguage": 5}}}, None),
        ({"forwardedProps": {"iacCode": {"preferredLanguage": ""}}}, None),
        ({"forwardedProps": {"iacCode": {"preferredLanguage": "x" * 65}}}, None),
        ({"forwardedProps": {"iacCode": "zh-CN"}}, None),
        ({"forwardedProps": []}, None),
        ({}, None),
        ([], None),
        ("zh-CN", None),
        (None, None),
    ],
)
def test_peek_preferred_language(payload: object, language: str | None) -> None:
    assert peek_preferred_language(payload) == language


def test_a_credential_of_4096_characters_is_accepted_and_a_longer_ones_message_echoes_nothing() -> None:
    parse_run_input(mutated(envelope_0_1, lambda p: iac(p).update(llmApiKey="k" * 4096)))
    error = refusal(mutated(envelope_0_1, lambda p: iac(p).update(llmApiKey="sk-" + "z" * 5000)))
    for language in ("en", "zh-CN"):
        text = render_error(error, language)
        assert "4096" in text and "zzz" not in text and "llmApiKey" in text
