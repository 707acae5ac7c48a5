"""Resume checks: does a ``resume[]`` answer every pending interrupt, once,
with a payload its schema accepts? Pure: the announced interrupts in,
answers out.

The order of the checks is the order of the documented codes: duplicates and
missing answers (``INCOMPLETE_RESUME``), answers to interrupts that were
already applied (``RESUME_ALREADY_APPLIED``) or never existed
(``UNKNOWN_INTERRUPT``), then payloads (``RESUME_PAYLOAD_INVALID``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from ..errors import AdapterError, ErrorCode
from .inputs import ResumeEntry


@attrs.frozen
class Answer:
    """One checked answer to one announced interrupt."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any
    #: The AG-UI ``Interrupt`` it answers, as announced.
    interrupt: Mapping[str, Any] = attrs.field(eq=False, repr=False)
    digest: str

    @property
    def kind(self) -> str:
        """The runtime's kind of input (``permission``, ``ask_user_question``...)."""
        return str(self.interrupt.get("metadata", {}).get("kind") or "")

    @property
    def decision(self) -> str:
        """For a permission: what the runtime is told (``cancelled`` means deny)."""
        if self.status == "cancelled":
            return "deny"
        return str(self.payload["decision"])

    @property
    def cancels_task(self) -> bool:
        """A cancelled question or selection cancels the whole task."""
        return self.status == "cancelled" and self.kind != "permission"


def answer_digest(entry: ResumeEntry) -> str:
    """A digest of one answer, to recognise a re-sent one."""
    canonical = json.dumps([entry.status, entry.payload], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_resume(
    entries: Sequence[ResumeEntry],
    pending: Sequence[Mapping[str, Any]],
    applied: Mapping[str, str],
) -> list[Answer]:
    """The answers to the ``pending`` interrupts, in their order, or the
    documented refusal; ``applied`` maps answered interrupt ids to digests."""
    by_id = {str(interrupt["id"]): interrupt for interrupt in pending}
    seen: set[str] = set()
    for entry in entries:
        if entry.interrupt_id in seen:
            raise AdapterError(ErrorCode.INCOMPLETE_RESUME, "resume_duplicate_ids")
        seen.add(entry.interrupt_id)
    unknown = [entry for entry in entries if entry.interrupt_id not in by_id]
    if unknown:
        if all(entry.interrupt_id in applied for entry in unknown):
            raise AdapterError(ErrorCode.RESUME_ALREADY_APPLIED)
        # The caller's own ids; what would have been right is the pending ones.
        raise AdapterError(
            ErrorCode.UNKNOWN_INTERRUPT, "unknown_interrupt_pending", id=_shown(unknown[0].interrupt_id),
            pending=", ".join(by_id),
        )
    if seen != set(by_id):
        raise AdapterError(ErrorCode.INCOMPLETE_RESUME)
    answers: dict[str, Answer] = {
        str(entry.interrupt_id): _checked(entry, by_id[entry.interrupt_id]) for entry in entries
    }
    return [answers[interrupt_id] for interrupt_id in by_id]


def _checked(entry: ResumeEntry, interrupt: Mapping[str, Any]) -> Answer:
    if entry.status == "resolved":
        if entry.payload is None:
            raise AdapterError(ErrorCode.RESUME_PAYLOAD_INVALID, "resume_payload_missing", id=entry.interrupt_id)
        import jsonschema  # only resumes need it; keeps a few MB off every idle process

        schema = interrupt.get("responseSchema") or {}
        try:
            jsonschema.validate(entry.payload, schema)
        except jsonschema.ValidationError as exc:
            raise _payload_refusal(entry.interrupt_id, exc) from None
    return Answer(entry.interrupt_id, entry.status, entry.payload, interrupt, answer_digest(entry))


def _shown(text: str) -> str:
    return text if len(text) <= 80 else text[:80] + "..."


def _payload_refusal(interrupt_id: str, exc: Any) -> AdapterError:
    """``RESUME_PAYLOAD_INVALID`` saying which field and what it takes, from
    the schema alone: the value given (free text may hold anything) is never
    repeated."""
    field = ".".join(["payload", *(str(step) for step in exc.absolute_path)])
    keyword, expected = exc.validator, exc.validator_value
    params: dict[str, Any] = {"id": interrupt_id, "field": field}
    if keyword in ("enum", "const"):
        options = expected if keyword == "enum" else [expected]
        allowed = ", ".join(json.dumps(option, ensure_ascii=False) for option in options)
        return AdapterError(ErrorCode.RESUME_PAYLOAD_INVALID, "resume_payload_allowed", allowed=allowed, **params)
    if keyword == "required" and isinstance(exc.instance, dict):
        missing = [name for name in expected if name not in exc.instance]
        params["field"] = f"{field}.{missing[0]}" if missing else field
        return AdapterError(ErrorCode.RESUME_PAYLOAD_INVALID, "resume_payload_required", **params)
    if keyword == "additionalProperties" and isinstance(exc.instance, dict):
        known = sorted((exc.schema.get("properties") or {}).keys())
        params["allowed"] = ", ".join(known) or "-"
        return AdapterError(ErrorCode.RESUME_PAYLOAD_INVALID, "resume_payload_unknown_field", **params)
    if keyword == "type":
        params["type"] = expected if isinstance(expected, str) else " or ".join(expected)
        return AdapterError(ErrorCode.RESUME_PAYLOAD_INVALID, "resume_payload_type", **params)
    return AdapterError(ErrorCode.RESUME_PAYLOAD_INVALID, "resume_payload_field", **params)


def answer_text(answer: Answer) -> str:
    """What a question or selection answer says to the runtime: the chosen
    option's label, or the free text."""
    payload = answer.payload or {}
    if isinstance(payload.get("freeText"), str):
        return str(payload["freeText"])
    selected = payload.get("selectedId")
    for option in answer.interrupt.get("metadata", {}).get("options", ()):
        if option.get("id") == selected:
            return str(option.get("label") or selected)
    return str(selected)
