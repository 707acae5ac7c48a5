"""An 8 MiB image, as the protocol reference allows, reaches the real runtime's model.

`iac-code a2a` 0.16 takes at most 5 MiB of inline image bytes: sent as is,
a valid 7.9 MiB PNG ended the run with `RUN_ERROR INVALID_INPUT` ("A2A binary
raw part content is too large"). The adapter now scales and re-encodes it first.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from aguiadapter.protocol.profile import Profile
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import check_stream, texts
from tests.support.envelopes import MIB, image_part
from tests.support.iac_runtime import IacRuntime
from tests.support.model_stub import ModelStub


def noisy_png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(out, "PNG", compress_level=1)
    return out.getvalue()


def images_sent(call_body: dict[str, object]) -> list[str]:
    """The image URLs (data: URLs) of the model request's user messages."""
    found = []
    for message in call_body.get("messages", []):  # type: ignore[union-attr]
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                found.append(str(part["image_url"]["url"]))
    return found


@pytest.fixture
def vision_stub_model(iac_runtime: IacRuntime) -> Iterator[None]:
    """The runtime takes the stub model for one that sees images (its settings.yml, read per request)."""
    settings = iac_runtime.config_dir / "settings.yml"
    before = settings.read_text(encoding="utf-8") if settings.exists() else ""  # the runtime keeps its userID there
    assert "multiModal" not in before
    section = f"multiModal:\n  models:\n    {iac_runtime.model}:\n      supportMultimodal: true\n"
    settings.write_text(before.rstrip("\n") + "\n" + section if before else section, encoding="utf-8")
    try:
        yield
    finally:
        settings.write_text(before, encoding="utf-8")


@pytest.mark.usefixtures("vision_stub_model")
async def test_an_8_mib_png_runs_to_the_end_against_the_real_runtime(
    iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub
) -> None:
    png = noisy_png(1600, 1740)
    assert 7.9 * MIB < len(png) <= 8 * MIB
    marker = f"photo-{uuid.uuid4()}"
    body = run_body(thread_id=f"e2e-image-{uuid.uuid4()}", text=None, cwd=str(iac_workspace))
    body["messages"] = [{"id": "m1", "role": "user", "content": [
        {"type": "text", "text": f"[scenario:normal] {marker}"}, image_part(png)]}]
    reply = await iac_adapter.run(body)
    assert reply.status == 200, reply.body[:300]
    events = check_stream(reply.body)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    assert texts(events)
    (call,) = model_stub.calls_with(marker)
    (sent,) = images_sent(call.body)
    assert sent.startswith("data:image/"), sent[:40]


def mixed_parts(iac_workspace: Path, marker: str) -> dict[str, object]:
    """A turn with an image by URL, a text, a document handle and an inline PNG."""
    body = run_body(thread_id=f"e2e-skip-{uuid.uuid4()}", text=None, cwd=str(iac_workspace))
    body["messages"] = [{"id": "m1", "role": "user", "content": [
        {"type": "image", "source": {"type": "url", "value": "https://example.invalid/a.png"}},
        {"type": "text", "text": f"[scenario:normal] {marker}", "lang": "en"},
        {"type": "document", "source": {"type": "file", "value": "file-abc", "provider": "openai"}},
        image_part(noisy_png(8, 8)),
    ]}]
    return body


@pytest.mark.usefixtures("vision_stub_model")
async def test_parts_the_runtime_cannot_use_are_skipped_and_the_real_runtime_gets_the_rest(
    iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub
) -> None:
    marker = f"skip-{uuid.uuid4()}"
    reply = await iac_adapter.run(mixed_parts(iac_workspace, marker))
    assert reply.status == 200, reply.body[:300]
    events = check_stream(reply.body, advertised=iac_adapter.advertised())
    assert events[1]["name"] == "iac-code.input.skipped.v1"
    assert [(p["index"], p["reason"]) for p in events[1]["value"]["parts"]] == [(0, "image_url"), (2, "unsupported_part")]
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    (call,) = model_stub.calls_with(marker)
    (sent,) = images_sent(call.body)
    assert sent.startswith("data:image/png"), "only the inline image reached the model"


async def test_the_compat_profile_refuses_those_parts_before_the_real_runtime_sees_the_turn(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path, model_stub: ModelStub
) -> None:
    """``--compat iac-code-agui``: the protocol reference's form, INVALID_INPUT, nothing sent on."""
    adapter = await start_adapter(tmp_path / "compat", iac_runtime.url, a2a_token=iac_runtime.token,
                                  allowed_cwds=(str(iac_runtime.workspaces_root),), profile=Profile.IAC_CODE_AGUI)
    marker = f"skip-compat-{uuid.uuid4()}"
    try:
        reply = await adapter.run(mixed_parts(iac_workspace, marker))
    finally:
        await adapter.close()
    assert reply.status == 400 and reply.json()["error"]["code"] == "INVALID_INPUT", reply.body[:300]
    assert model_stub.calls_with(marker) == []
