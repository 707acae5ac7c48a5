"""The runtime's requests for input ("envelopes"), typed (pure).

iac-code asks for input in two places of a status update's
``metadata.iac_code``: ``input`` (the task stops in ``INPUT_REQUIRED``, or a
sub-pipeline asks while the task keeps ``WORKING``) and
``pendingPermissions[]`` (every sub-pipeline permission still waiting). Only
entries with ``required: true`` are requests. An :class:`InputEnvelope` keeps
the envelope exactly as sent (the answer must echo its ids) with the fields
the adapter decides on typed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

#: Scopes of inputs raised inside a sub-pipeline: the task keeps working, and
#: the answer goes out with ``SendMessage`` (a stream would only bring an ack).
SIDEBAND_SCOPES: Final = frozenset({"candidate", "candidate_step"})
#: Keys the runtime drops when it lists a waiting input again (``GetTask``'s
#: ``pendingPermissions``); what the first sighting said is kept.
_REMEMBERED_KEYS: Final = ("scope", "subPipelineId")


@attrs.frozen
class InputEnvelope:
    """One input the runtime waits for."""

    input_id: str
    kind: str
    #: The envelope as the runtime sent it (merged with what an earlier
    #: sighting of the same input said, see :func:`required_inputs`).
    fields: dict[str, Any] = attrs.field(factory=dict, eq=False)
    #: Raised inside a sub-pipeline: answered with ``SendMessage``.
    sideband: bool = False

    @property
    def tool_use_id(self) -> str | None:
        """The tool call this input gates (permissions, questions)."""
        return _text(self.fields.get("toolUseId"))

    @property
    def tool_name(self) -> str | None:
        """The gated tool's name."""
        return _text(self.fields.get("toolName"))

    @property
    def request_task_id(self) -> str | None:
        """The task an answer must be sent to."""
        return _text(self.fields.get("requestTaskId"))

    @property
    def is_permission(self) -> bool:
        """A permission (answered with a data part) rather than a question or selection."""
        return self.kind == "permission"


def envelope_of(raw: Mapping[str, Any], *, listed: bool = False, known: InputEnvelope | None = None) -> InputEnvelope:
    """An envelope from the runtime's JSON; ``listed`` when it came from
    ``pendingPermissions`` (a sub-pipeline permission by definition)."""
    fields = dict(raw)
    if known is not None:
        for key in _REMEMBERED_KEYS:
            if fields.get(key) is None and known.fields.get(key) is not None:
                fields[key] = known.fields[key]
    sideband = (
        listed
        or fields.get("scope") in SIDEBAND_SCOPES
        or isinstance(fields.get("subPipelineId"), str)
        or (known is not None and known.sideband)
    )
    return InputEnvelope(
        input_id=str(fields.get("inputId") or ""),
        kind=str(fields.get("kind") or "input_required"),
        fields=fields,
        sideband=sideband,
    )


def required_inputs(iac: Mapping[str, Any], known: Iterable[InputEnvelope] = ()) -> list[InputEnvelope]:
    """What the runtime waits for according to one ``metadata.iac_code``:
    the ``input`` envelope and the ``pendingPermissions``, required ones
    only, once each; ``known`` envelopes lend what a re-listing dropped."""
    by_id = {envelope.input_id: envelope for envelope in known}
    found: list[InputEnvelope] = []
    seen: set[str] = set()
    candidates = [(iac.get("input"), False)]
    candidates += [(entry, True) for entry in iac.get("pendingPermissions") or ()]
    for raw, listed in candidates:
        if not isinstance(raw, dict) or raw.get("required") is not True:
            continue
        input_id = str(raw.get("inputId") or "")
        if input_id in seen:
            continue
        seen.add(input_id)
        found.append(envelope_of(raw, listed=listed, known=by_id.get(input_id)))
    return found


def acknowledgement(result: dict[str, Any]) -> dict[str, Any] | None:
    """The data of an acknowledgement message (``permission_ack``), if
    ``result`` is one: the runtime took an answer, the turn goes on."""
    message = result.get("message", result)
    if not isinstance(message, dict) or message.get("role") != "ROLE_AGENT":
        return None
    for part in message.get("parts") or ():
        data = part.get("data") if isinstance(part, dict) else None
        if isinstance(data, dict) and str(data.get("kind") or "").endswith("_ack"):
            return data
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
