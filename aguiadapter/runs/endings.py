"""How a run that went wrong ends: a pure policy, read as a table.

The run driver asks :func:`ending_for` once a run cannot go on (the runtime
failed, its stream broke, a write of the record was lost) and carries out
the answer: which transition ends the run, with which error code, and
whether the runtime's task is cancelled first. Nothing here does I/O.

A lost write (:class:`LostWrite`) ends the run the way a crash of the
process would: nothing more is written, the claim is given back, the client
hears ``STATE_PERSISTENCE_FAILED``, and the next request that touches the
thread recovers it from what the runtime says (:mod:`.service`). Before
that, the task is cancelled when recovery could not find it or would
announce something never saved (:data:`CANCELLED_AFTER_LOST`), and never
when the lost write carries an answer the person gave: the runtime took
it, and recovery learns from the runtime what it did with it.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from ..a2a import wire
from ..a2a.client import A2AError, A2ARpcError, A2AUnavailable
from ..errors import AdapterError, ErrorCode
from .follow import LostTask
from ..runtime.iac_code import AnswerRefused, TaskMismatch
from ..translate.mapper import IdentityMismatch
from ..store.contract import LostWrite
from ..threads import machine as tm


class End(enum.Enum):
    """The transition that ends a run gone wrong."""

    #: The answers were not applied: the thread waits for them again.
    REJECT = "reject"
    #: The runtime may be carrying out answers it took, or may have taken:
    #: look again later.
    DETACH = "detach"
    FAIL = "fail"
    #: The record cannot be written: write nothing more, as a crash.
    LOST = "lost"


@attrs.frozen
class Ending:
    """What the driver does to end the run."""

    end: End
    code: ErrorCode
    #: Cancel the runtime's task before ending.
    cancel_task: bool = False
    #: The runtime's own words, for the client's message.
    detail: str | None = None
    #: A catalog message more precise than the code's own.
    message_id: str | None = None


@attrs.frozen
class Failure:
    """What went wrong, and what the run had done by then."""

    code: ErrorCode
    #: The run carries answers (a resume).
    resuming: bool = False
    #: The runtime took at least one of the run's answers.
    accepted: bool = False
    #: A new user turn: nothing the person decided rides on it.
    turn: bool = True
    #: The runtime refused to take the answer.
    answer_refused: bool = False
    #: The task is not (or no longer verifiably) the run's own.
    foreign: bool = False
    #: The runtime refused the request's parameters (its message, if so).
    invalid_params: str | None = None
    #: The transition whose write was lost.
    lost_write: str | None = None
    #: The task may wait for an input nobody can answer: cancel it.
    stuck: bool = False
    #: The runtime answered, refusing this server's credentials (401, 403).
    unauthorized: bool = False
    #: The request that carried the answers may have reached the runtime
    #: (the connection broke after it was made).
    sent: bool = False


#: Lost writes after which the runtime's task is cancelled: recovery needs
#: what they wrote (the task binding; a new interrupt, never announced;
#: a handoff nobody would adopt; an adoption, after which nobody relays the
#: run; a grace the run cannot keep: its client left). Any other lost
#: write leaves the task to
#: recovery: ``accept`` carries an answer the person gave, ``finish``,
#: ``reject``, ``detach``, ``fail`` and ``cancel`` end a run whose task is
#: done, still waits for the same answers, or was cancelled already.
CANCELLED_AFTER_LOST: Final = frozenset(
    event.name for event in (tm.BindTask, tm.Interrupt, tm.HandOff, tm.Adopt, tm.Park)
)


def ending_for(failure: Failure) -> Ending:
    """How the run ends after ``failure`` (see the table in the tests); a
    refused token says so in its message, whatever the ending."""
    ending = _ending_for(failure)
    if failure.unauthorized and ending.code is ErrorCode.A2A_UNAVAILABLE:
        return attrs.evolve(ending, message_id="a2a_unauthorized")
    return ending


def _ending_for(failure: Failure) -> Ending:
    code = failure.code
    if failure.lost_write is not None:
        return Ending(End.LOST, ErrorCode.STATE_PERSISTENCE_FAILED, failure.lost_write in CANCELLED_AFTER_LOST)
    if failure.resuming and not failure.accepted and not failure.foreign:
        if failure.answer_refused:
            return Ending(End.REJECT, ErrorCode.A2A_UNAVAILABLE)
        if failure.sent and code is ErrorCode.A2A_UNAVAILABLE:
            # The answer went out and no receipt came back: the runtime may
            # have taken it. Asked like a dead resume on the next request.
            return Ending(End.DETACH, code)
        # Nothing was applied: the interrupts stay pending and retryable.
        return Ending(End.REJECT, code)
    if code is ErrorCode.A2A_UNAVAILABLE and not failure.turn:
        # The runtime may be carrying out what it took; look again later.
        return Ending(End.DETACH, code)
    if failure.invalid_params is not None and not failure.accepted:
        # The runtime refused the request itself (a pipeline it does not
        # have, an image its model cannot read): the caller's input, in the
        # runtime's own words.
        return Ending(End.FAIL, ErrorCode.INVALID_INPUT, detail=failure.invalid_params)
    # Only a task whose identity was verified is ours to cancel.
    ours = code not in (ErrorCode.A2A_UNAVAILABLE, ErrorCode.EXECUTION_LOST)
    return Ending(End.FAIL, code, cancel_task=ours or failure.stuck)


def failure_of(exc: BaseException, *, resuming: bool, accepted: bool, turn: bool) -> Failure:
    """The :class:`Failure` an exception that stopped a run stands for."""
    invalid = exc.message if isinstance(exc, A2ARpcError) and exc.code == wire.INVALID_PARAMS else None
    return Failure(
        error_code(exc),
        resuming=resuming,
        accepted=accepted,
        turn=turn,
        answer_refused=isinstance(exc, AnswerRefused),
        foreign=isinstance(exc, (IdentityMismatch, TaskMismatch, LostTask)),
        invalid_params=invalid,
        lost_write=exc.transition if isinstance(exc, LostWrite) else None,
        stuck=isinstance(exc, LostTask) and exc.cancel,
        sent=isinstance(exc, A2AUnavailable) and exc.sent,
        unauthorized=isinstance(exc, A2AUnavailable) and exc.unauthorized,
    )


def error_code(exc: BaseException) -> ErrorCode:
    """The error code a run that stopped on ``exc`` reports."""
    if isinstance(exc, AdapterError):
        return exc.code
    if isinstance(exc, (A2AUnavailable, AnswerRefused)):
        return ErrorCode.A2A_UNAVAILABLE
    if isinstance(exc, A2ARpcError):
        return ErrorCode.A2A_EXECUTION_FAILED
    if isinstance(exc, (IdentityMismatch, TaskMismatch)):
        return ErrorCode.A2A_PROTOCOL_ERROR
    if isinstance(exc, A2AError):
        return ErrorCode.A2A_UNAVAILABLE
    return ErrorCode.STATE_PERSISTENCE_FAILED
