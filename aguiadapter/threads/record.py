"""The durable record of one AG-UI thread.

A :class:`ThreadRecord` is the thread machine's model: the machine keeps its
state in ``record.state`` and the store writes the whole record after every
transition. It holds identifiers and idempotency data only; it has no field a
secret could go into (request secrets are forwarded to A2A and forgotten).
"""

from __future__ import annotations

import enum
import hashlib
import json
import operator
import re
import time
from typing import Any, Final

import attrs
import cattrs

from ..fastjson import dumps_indented
from ..runtime.envelope import InputEnvelope, envelope_of
from ..translate.pipeline import PipelineState

RECORD_SCHEMA_VERSION = 2
#: How many applied answers a thread keeps (runs are all kept: the stores move
#: the older ones out of the record, see aguiadapter/store/run_history.py).
RUN_HISTORY_LIMIT = 1000


class ThreadState(str, enum.Enum):
    """Where a thread is in its lifecycle (see :mod:`.machine`)."""

    IDLE = "idle"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    TERMINAL = "terminal"


class RunPhase(str, enum.Enum):
    """Where a ``running`` thread's run stands (``record.run_phase``; see
    :mod:`.machine`, whose declaration is the one list of moves between them)."""

    #: A process of ours streams the run to its client.
    RELAYED = "relayed"
    #: Its client went away; it goes on, into its event log, until ``parked_until``.
    PARKED = "parked"
    #: Its replica shut down; no process relays it until a re-attach adopts it (until ``parked_until``).
    HANDED_OFF = "handed_off"
    #: No stream of ours follows it: the runtime's task carries out answers it took.
    CARRIED = "carried"


class RunKind(str, enum.Enum):
    """What the thread's current run does, which decides how a crash of it
    is recovered."""

    #: A new user turn: nothing of the person's decisions rides on it.
    TURN = "turn"
    #: Answers to interrupts go (or went) to the runtime.
    RESUME = "resume"
    #: Announces what the runtime waits for; sends nothing.
    ANNOUNCE = "announce"
    #: Follows a task that carries out answers the runtime already took.
    FOLLOW = "follow"


@attrs.frozen
class RunEntry:
    """One admitted run: the digest of its request and how it ended (replaced, never changed:
    a transition on a working copy shares its entries with the live record)."""

    digest: str
    outcome: str | None = None


@attrs.define
class PendingInterrupt:
    """An interrupt the client must answer, with the runtime's request behind it."""

    #: The AG-UI ``Interrupt`` object, exactly as announced.
    interrupt: dict[str, Any]
    envelope: InputEnvelope
    expires_at: float
    #: The pipeline cursor when it was raised: evidence of its answer comes later.
    raised_after: int = 0
    #: Digest of the answer a resume is sending: written before it is sent,
    #: so that recovery knows which answer a dead resume carried.
    sending: str | None = None

    @property
    def id(self) -> str:
        """The interrupt id (the runtime's input id)."""
        return self.envelope.input_id


@attrs.frozen
class AppliedAnswer:
    """An answer the runtime took (replaced, never changed, as :class:`RunEntry`)."""

    digest: str
    #: Whether a client was told how the run that carried it ended; until
    #: then a retry of the same answer follows or reports that run.
    reported: bool = True
    #: The tool call the answer let run (its result is part of that report).
    tool_use_id: str | None = None


@attrs.frozen
class EarlierConversation:
    """A conversation a thread had before it was pinned again: it stays on
    the runtime it was held by (history cannot show it, and says so)."""

    #: The pool runtime's name.
    runtime: str
    #: That conversation's A2A context there.
    context_id: str


@attrs.define
class ThreadRecord:
    """Everything the adapter must remember about a thread between runs."""

    thread_id: str
    context_id: str
    cwd: str
    user_id: str | None = None
    #: The verified user the thread belongs to (``None`` without verified identity); see threads/access.py.
    principal: str | None = None
    #: Kept under its user's own key (:func:`thread_key`); ``False`` for a
    #: record made before thread ids were per user, which keeps its old key.
    namespaced: bool = False
    state: ThreadState = ThreadState.IDLE
    session_id: str | None = None
    execution_id: str | None = None
    ros_invocation_id: str | None = None
    task_id: str | None = None
    active_run_id: str | None = None
    #: What the current run does (``None`` when none is active).
    active_run_kind: RunKind | None = None
    #: The id of the newest user message already sent to the runtime.
    last_user_message_id: str | None = None
    last_error: str | None = None
    runs: dict[str, RunEntry] = attrs.Factory(dict)
    #: How many older runs the store moved out of ``runs`` into the thread's
    #: run history (aguiadapter/store/run_history.py): their ids are looked up there.
    earlier_runs: int = 0
    pending_interrupts: list[PendingInterrupt] = attrs.Factory(list)
    #: interruptId → the answer the runtime took.
    applied_answers: dict[str, AppliedAnswer] = attrs.Factory(dict)
    #: The current execution's pipeline cursor (sequence, open steps).
    pipeline: PipelineState | None = None
    #: The active run has no client (it went away, or its replica shut
    #: down): the run is cancelled at this time unless a client re-attaches.
    parked_until: float | None = None
    #: Where the run stands while the thread is ``running`` (``None`` otherwise).
    run_phase: RunPhase | None = None
    #: How many times the active run was adopted (keeps its message ids unique).
    adoptions: int = 0
    #: The assistant message a handed-off run left open in its log: the
    #: replica that adopts the run goes on with it (one message across the
    #: handover); whoever ends the run otherwise closes it first.
    handed_off_text: str | None = None
    #: The reply's text relayed before the handover (with :attr:`handed_off_text`):
    #: the adopter sends what its subscription's Task shows beyond it.
    handed_off_streamed: str | None = None
    updated_at: float = 0.0
    #: The name of the pool's runtime the thread is pinned to, written with the
    #: first run it admits; ``None`` in a record made before pools (the runtime
    #: named ``default``, which ``--a2a-url`` alone is).
    runtime: str | None = None
    #: Where its earlier conversations stayed when the thread was pinned again
    #: (its runtime had left the pool), oldest first; empty for the others.
    earlier: list[EarlierConversation] = attrs.Factory(list)
    #: When the thread was made (``None`` for a record made before records
    #: kept it); shown by the thread list, not part of the thread's state
    #: (records that differ only in it compare equal).
    created_at: float | None = attrs.field(factory=time.time, eq=False)
    version: int = 0
    schema_version: int = RECORD_SCHEMA_VERSION

    def __attrs_post_init__(self) -> None:
        if self.state is ThreadState.RUNNING and self.run_phase is None:
            # Made in code without a phase (as the stored form before the phase, see _with_run_phase).
            self.run_phase = RunPhase.RELAYED if self.active_run_id is not None else RunPhase.CARRIED

    @property
    def key(self) -> str:
        """Where the record, its claim, deadline and run logs are kept."""
        return thread_key(self.thread_id, self.principal) if self.namespaced else self.thread_id

    def remember_run(self, run_id: str, digest: str) -> None:
        """Record an admitted run (none is forgotten: the store moves the
        older ones out of the record when it saves it)."""
        self.runs[run_id] = RunEntry(digest)

    def remember_answer(
        self, interrupt_id: str, digest: str, *, reported: bool, tool_use_id: str | None = None
    ) -> None:
        """Record an applied answer, forgetting the oldest beyond the limit."""
        self.applied_answers[interrupt_id] = AppliedAnswer(digest, reported, tool_use_id)
        while len(self.applied_answers) > RUN_HISTORY_LIMIT:
            del self.applied_answers[next(iter(self.applied_answers))]

    def unreported_tools(self) -> list[str]:
        """The tool calls of the taken answers no client heard the end of."""
        return [a.tool_use_id for a in self.applied_answers.values() if not a.reported and a.tool_use_id]

    def unreported_answers(self) -> dict[str, str]:
        """interruptId → digest of the taken answers no client heard the end of."""
        return {key: answer.digest for key, answer in self.applied_answers.items() if not answer.reported}

    @property
    def next_deadline(self) -> float | None:
        """When the first pending interrupt expires (``None``: nothing pending)."""
        return min((item.expires_at for item in self.pending_interrupts), default=None)

    @property
    def deadline(self) -> float | None:
        """When the thread must be looked at without any request: its
        interrupts expire (also while a resume carries answers to them), or
        a handed-off run's grace ends."""
        if self.state is ThreadState.INTERRUPTED:
            return self.next_deadline
        if self.state is not ThreadState.RUNNING:
            return None
        handed_off = self.run_phase is RunPhase.HANDED_OFF
        due = [at for at in (self.next_deadline, self.parked_until if handed_off else None) if at is not None]
        return min(due, default=None)


#: The record's fields, in the order its ``__init__`` takes them.
RECORD_FIELDS: Final = tuple(field.name for field in attrs.fields(ThreadRecord))
# copy_record passes them by position: each must be an __init__ argument of its own name.
assert all(field.init and field.alias == field.name for field in attrs.fields(ThreadRecord))
#: All the record's field values in one call, in :data:`RECORD_FIELDS` order.
_record_values: Final = operator.attrgetter(*RECORD_FIELDS)


def copy_record(record: ThreadRecord) -> ThreadRecord:
    """A shallow copy of ``record``: what ``attrs.evolve(record)`` makes, at a
    sixth of its cost (evolve looks every field's definition up again; a
    run copies the record six times)."""
    return ThreadRecord(*_record_values(record))


def thread_key(thread_id: str, principal: str | None) -> str:
    """The storage key of a thread: each verified user has a namespace of their
    own, and the callers nobody names (open and shared-token modes) share one.

    With a principal the key is ``u/<first 32 hex of sha256(principal)>/<threadId>``:
    two users' ``thread-1`` are two threads, and no thread id of one user
    reaches the other's. Without one the key is the thread id itself (as it
    always was, so that stored threads stay where they are), except for an id
    shaped like a user's key (``u/`` and 32 hex digits and ``/``) or one
    beginning with ``o/``: that one is kept under ``o/<threadId>``. No bare
    id is ever a user's key, whatever it spells (``u/<hash of alice>/z`` is a
    thread of the shared namespace, not alice's ``z``), and no two ids share
    a key. The stores turn keys into safe file names and Redis keys as they
    did thread ids.
    """
    if principal is None:
        return OPEN_PREFIX + thread_id if spells_a_key(thread_id) else thread_id
    return f"{USER_PREFIX}{hashlib.sha256(principal.encode()).hexdigest()[:32]}/{thread_id}"


def spells_a_key(thread_id: str) -> bool:
    """Whether a bare id could be mistaken for a key of a namespace (a user's, or ``o/``)."""
    return thread_id.startswith(OPEN_PREFIX) or is_user_key(thread_id)


def is_user_key(thread_id: str) -> bool:
    """Whether ``thread_id`` has the shape of a verified user's key."""
    return _USER_KEY.match(thread_id) is not None


#: How a per-user key begins.
USER_PREFIX = "u/"
#: How the key of a thread nobody owns begins when its id looks like a key.
OPEN_PREFIX = "o/"
_USER_KEY = re.compile(r"u/[0-9a-f]{32}/")

_converter = cattrs.Converter(forbid_extra_keys=False)


def record_to_json(record: ThreadRecord) -> bytes:
    """Serialize a record (stable key order, UTF-8, indented for a reader)."""
    return dumps_indented(_converter.unstructure(record))


def record_from_json(data: bytes) -> ThreadRecord:
    """Parse a stored record (of any schema version this code knows);
    raises ``ValueError`` when it is not one."""
    try:
        raw = json.loads(data)
        if isinstance(raw, dict) and raw.get("schema_version", 1) == 1:
            raw = _upgrade_from_v1(raw)
        if isinstance(raw, dict) and "run_phase" not in raw:
            raw = _with_run_phase(raw)
        if isinstance(raw, dict) and "created_at" not in raw:
            raw = {**raw, "created_at": None}  # made before records kept it: unknown, not "now"
        return _converter.structure(raw, ThreadRecord)
    except (ValueError, TypeError, KeyError, AttributeError, cattrs.BaseValidationError) as exc:
        raise ValueError(f"not a thread record: {exc}") from exc


def _with_run_phase(raw: dict[str, Any]) -> dict[str, Any]:
    """A record written before the run's phase was a field of its own said it
    with three: ``handed_off``, ``active_run_id`` and ``parked_until``. The
    phase is read from them; the next save writes the field (and no
    ``handed_off``)."""
    upgraded = {key: value for key, value in raw.items() if key != "handed_off"}
    phase = None
    if raw.get("state") == ThreadState.RUNNING.value:
        if raw.get("handed_off"):
            phase = RunPhase.HANDED_OFF
        elif raw.get("active_run_id") is None:
            phase = RunPhase.CARRIED
        elif raw.get("parked_until") is not None:
            phase = RunPhase.PARKED
        else:
            phase = RunPhase.RELAYED
    upgraded["run_phase"] = None if phase is None else phase.value
    return upgraded


def _upgrade_from_v1(raw: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 kept interrupts as ``{interrupt, envelope, expiresAt}`` dicts
    and applied answers as bare digests (all of them reported)."""
    upgraded = dict(raw)
    upgraded["pending_interrupts"] = [
        {
            "interrupt": item["interrupt"],
            "envelope": _converter.unstructure(envelope_of(item["envelope"])),
            "expires_at": item["expiresAt"],
        }
        for item in raw.get("pending_interrupts") or ()
    ]
    upgraded["applied_answers"] = {
        key: {"digest": digest, "reported": True} for key, digest in (raw.get("applied_answers") or {}).items()
    }
    if raw.get("state") == "running":
        # Schema 1 did not say what a run did, but kept the interrupts of a
        # resume pending until the runtime took them.
        kind = RunKind.RESUME if raw.get("pending_interrupts") else RunKind.TURN
        upgraded["active_run_kind"] = kind.value
    upgraded["schema_version"] = RECORD_SCHEMA_VERSION
    return upgraded


#: How a stored record names its owner: a top-level key of the indented JSON
#: :func:`record_to_json` writes (nested keys are indented further, and a
#: string value holds no raw newline).
_PRINCIPAL_LINE = b'\n  "principal": '


def stored_principal(data: bytes) -> tuple[bool, str | None]:
    """``(True, principal)`` of a stored record, read from its bytes without
    parsing the rest; ``(False, None)`` when its layout does not say (then
    only parsing it tells)."""
    start = data.find(_PRINCIPAL_LINE)
    if start < 0:
        return False, None
    start += len(_PRINCIPAL_LINE)
    end = data.find(b"\n", start)
    try:
        value = json.loads(data[start:end if end >= 0 else len(data)].rstrip().removesuffix(b","))
    except ValueError:
        return False, None
    if value is None or isinstance(value, str):
        return True, value
    return False, None
