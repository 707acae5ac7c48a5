"""Which wire profile serves is said where an operator and a front end look:
``/health``, ``/capabilities`` (with the transport extension said to be
this server's own) and the banner (tests/test_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ag_ui.core.capabilities import AgentCapabilities

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.profile import Profile
from tests.support.adapter import start_adapter
from tests.support.stops import PROFILES


@pytest.mark.parametrize("profile", PROFILES)
async def test_health_and_capabilities_name_the_profile(tmp_path: Path, demo: DemoRuntime, profile: Profile) -> None:
    adapter = await start_adapter(tmp_path / "state", demo.url, profile=profile.value)
    try:
        health = (await adapter.get("health")).json()
        capabilities = (await adapter.get("capabilities")).json()
    finally:
        await adapter.close()
    assert health["profile"] == profile.value and health["protocolVersion"] == "1.0"
    ours = capabilities["custom"]["iacCode"]
    assert ours["profile"] == profile.value
    assert "iac-code.input.skipped.v1" in ours["customEvents"]
    AgentCapabilities.model_validate(capabilities)


@pytest.mark.parametrize("retention", [600.0, 0.0])
async def test_the_capabilities_say_ids_re_attach_and_thread_routes_are_this_servers_own(
    tmp_path: Path, demo: DemoRuntime, retention: float
) -> None:
    adapter = await start_adapter(tmp_path / "state", demo.url, replay_retention_seconds=retention)
    try:
        capabilities = (await adapter.get("capabilities")).json()
    finally:
        await adapter.close()
    extension = capabilities["custom"]["iacCode"]["transportExtension"]
    resumable = retention > 0
    assert extension["standard"] is False
    assert "own extension" in extension["description"] and "ignore id: lines" in extension["description"]
    assert (extension["sseEventIds"], extension["lastEventIdReattach"]) == (resumable, resumable)
    assert capabilities["transport"]["resumable"] is resumable
    routes = extension["threadRoutes"]
    assert {"/threads", "/threads/{threadId}", "/threads/{threadId}/messages"} <= set(routes)
    assert ("/threads/{threadId}/runs/{runId}/events" in routes) is resumable
