"""How a run stopped on purpose ends, in each wire profile.

AG-UI 1.0 (the default) closes it with ``RUN_FINISHED`` and the cancelled
outcome, everything it opened closed first, no ``result``; the
``iac-code-agui`` profile (``--compat``) ends it with ``RUN_ERROR CANCELLED``.
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import RunFinishedEvent

from aguiadapter.protocol.profile import Profile
from tests.support.agui import check_order

PROFILES = list(Profile)
"""Both profiles, for ``pytest.mark.parametrize``."""


def assert_stopped(events: list[dict[str, Any]], profile: Profile = Profile.AGUI_1_0) -> None:
    """``events`` is one whole run that ends as a stop in ``profile``'s form."""
    check_order(events)
    last = events[-1]
    if profile is Profile.IAC_CODE_AGUI:
        assert last["type"] == "RUN_ERROR" and last["code"] == "CANCELLED", last
        return
    assert last["type"] == "RUN_FINISHED" and last["outcome"] == {"type": "cancelled"}, last
    assert "result" not in last, last
    started = events[0]
    assert (last["threadId"], last["runId"]) == (started["threadId"], started["runId"]), "one run's identity"
    finished = RunFinishedEvent.model_validate(last)
    assert finished.outcome is not None and finished.outcome.type == "cancelled"
