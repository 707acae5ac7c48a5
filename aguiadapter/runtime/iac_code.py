"""The iac-code runtime, as a run of ours uses it (the async edge).

What is specific to iac-code behind the A2A wire lives here: how an answer
is sent (a permission is a data part, a question or selection the chosen
label as text; a sub-pipeline input goes out with ``SendMessage``), how a
task is looked at (``GetTask``, plus the pipeline state route for a
pipeline) and followed (``SubscribeToTask`` while it works), and how a
session is restored after a restart of either side. The decisions taken on
what it returns are pure and live in :mod:`.evidence`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import attrs

from ..a2a import wire
from ..a2a.client import A2AClient, A2AError, A2AHttpError, A2ARpcError
from ..a2a.messages import answer_message, permission_part
from ..errors import AdapterError, ErrorCode
from ..protocol.inputs import IacCodeProps
from ..protocol.resume import Answer, answer_text
from .checkpoints import read_checkpoints, waiting_permission
from .envelope import InputEnvelope, acknowledgement
from .evidence import TaskView
from .transcript import open_tool_uses, tool_call

log = logging.getLogger(__name__)

SESSION_RESTORE_PATH: Final = "/iac-code/session/ensure-restored"
PIPELINE_STATE_PATH: Final = "/iac-code/pipeline/state"
EXECUTION_STATE_PATH: Final = "/iac-code/execution/state"
SESSION_RECOVERY_PATH: Final = "/iac-code/session/recovery"

Batches = AsyncIterator[list[dict[str, Any]]]


class AnswerRefused(Exception):
    """The runtime did not accept an interrupt answer; it stays pending."""


class TaskMismatch(Exception):
    """The task the runtime returned is not the thread's."""


@attrs.frozen
class CurrentTask:
    """A context's current task, as :meth:`IacCodeRuntime.current_task` found it."""

    task_id: str
    session_id: str | None
    #: It works, or waits for an input (not a finished turn, not ended).
    running: bool


class IacCodeRuntime:
    """One runtime endpoint, with what this process already restored."""

    def __init__(self, client: A2AClient, config_dir: Path | None = None) -> None:
        self.client = client
        #: The config folder of a runtime on this machine, when the adapter shares it.
        self.config_dir = config_dir
        #: Sessions this process already asked the runtime to restore.
        self._restored: set[str] = set()

    # ----------------------------------------------------------- looking
    async def restore_session(self, cwd: str, session_id: str | None, task_id: str | None) -> None:
        """Once per process and session: ask the runtime to restore the
        iac-code session (after a restart of either side). A session the
        runtime no longer has is lost; a runtime without the route, or a
        restore that fails for now, leaves the task check to decide."""
        if session_id is None or session_id in self._restored:
            return
        body: dict[str, Any] = {"cwd": cwd, "sessionId": session_id}
        if task_id is not None:
            body["taskId"] = task_id
        try:
            await self.client.post_json(SESSION_RESTORE_PATH, body)
        except A2AHttpError as exc:
            if exc.status == 404 and isinstance(exc.body, dict) and exc.body.get("status") == "not_found":
                raise AdapterError(ErrorCode.EXECUTION_LOST, "session_lost") from exc
            log.info("session restore for %s not confirmed: HTTP %s", session_id, exc.status)
        except A2AError as exc:
            log.info("session restore for %s not confirmed: %s", session_id, type(exc).__name__)
        self._restored.add(session_id)

    async def view(
        self, task_id: str, context_id: str, *, pipeline_after: int | None, transcript: bool = False
    ) -> TaskView:
        """The task as the runtime sees it now: for a pipeline (``pipeline_after``
        is its cursor) with its state route's events after that sequence; else
        with the execution's state, and (``transcript``) the session's
        transcript. Raises :class:`A2AError` when the task cannot be asked for."""
        try:
            task = await self.client.get_task(task_id)
        except A2ARpcError as exc:
            if exc.code == wire.TASK_NOT_FOUND:
                return TaskView(None, is_pipeline=pipeline_after is not None)
            raise
        if task.get("id") != task_id or task.get("contextId") != context_id:
            raise TaskMismatch(f"GetTask({task_id}) returned task {task.get('id')!r} of {task.get('contextId')!r}")
        iac = (task.get("metadata") or {}).get(wire.IAC_CODE_KEY) or {}
        is_pipeline = pipeline_after is not None or "pipeline" in iac
        if is_pipeline:
            return TaskView(task, await self.pipeline_state(task_id, pipeline_after or 0), True)
        execution = await self.execution_state(context_id)
        messages = None
        if transcript and execution is not None and isinstance(execution.get("executionId"), str):
            messages = await self.transcript(context_id, str(execution["executionId"]))
        return TaskView(task, None, False, execution, messages)

    async def execution_state(self, context_id: str) -> dict[str, Any] | None:
        """The runtime's state of the context's current execution (``None``
        when it does not answer: a runtime without the route)."""
        try:
            return await self.client.get_json(EXECUTION_STATE_PATH, {"contextId": context_id})
        except A2AError as exc:
            log.debug("no execution state for %s (%s): the task alone tells", context_id, type(exc).__name__)
            return None

    async def transcript(self, context_id: str, execution_id: str) -> list[dict[str, Any]] | None:
        """The session's messages, for what a broken stream did not carry."""
        try:
            document = await self.client.get_json(
                SESSION_RECOVERY_PATH, {"contextId": context_id, "executionId": execution_id}
            )
        except A2AError as exc:
            log.info("session transcript of %s not read: %s", context_id, type(exc).__name__)
            return None
        messages = document.get("messages")
        return [item for item in messages if isinstance(item, dict)] if isinstance(messages, list) else None

    async def current_task(self, context_id: str) -> CurrentTask | None:
        """The context's current task (the execution-state route names it,
        GetTask shows it): what a dead turn whose task id was never stored
        left behind, when the runtime took its message. ``None`` when the
        runtime does not say.

        ``ListTasks`` (contextId) lists every task of the context, one per
        turn, and nothing in it tells the newest from an earlier turn's
        finished one: the current execution does."""
        execution = await self.execution_state(context_id)
        task_id = None if execution is None else execution.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            return None
        try:
            task = await self.client.get_task(task_id, history_length=0)
        except A2AError as exc:
            log.info("task %s of %s not looked at: %s", task_id, context_id, type(exc).__name__)
            return None
        if task.get("id") != task_id or task.get("contextId") != context_id:
            return None
        session = ((task.get("metadata") or {}).get(wire.IAC_CODE_KEY) or {}).get("iacCodeSessionId")
        return CurrentTask(task_id, session if isinstance(session, str) and session else None, _still_runs(task))

    async def pipeline_state(self, task_id: str, after: int) -> dict[str, Any] | None:
        """The pipeline state route (snapshot and events after ``after``);
        ``None`` when the runtime does not answer it."""
        try:
            return await self.client.get_json(PIPELINE_STATE_PATH, {"taskId": task_id, "afterSequence": str(after)})
        except A2AError as exc:
            log.info("pipeline state of %s not read: %s", task_id, type(exc).__name__)
            return None

    async def unseen_inputs(self, view: TaskView, session_id: str | None) -> list[InputEnvelope]:
        """The permissions the task waits for that no stream of ours
        announced, as far as a shared config folder tells (see
        :mod:`.checkpoints`); none for a runtime elsewhere."""
        task, transcript = view.task, view.transcript
        if self.config_dir is None or session_id is None or task is None or transcript is None:
            return []
        checkpoints = await asyncio.to_thread(read_checkpoints, self.config_dir, session_id)
        found = []
        for tool_use_id in open_tool_uses(transcript):
            block = tool_call(transcript, tool_use_id)
            envelope = None if block is None else waiting_permission(
                checkpoints, str(task.get("id")), str(task.get("contextId")), block
            )
            if envelope is not None:
                log.info("task %s: permission %s was raised while no stream followed it; its ids read from "
                         "the runtime's folder", task.get("id"), envelope.input_id)
                found.append(envelope)
        return found

    # --------------------------------------------------------- answering
    def answer(
        self,
        answer: Answer,
        envelope: InputEnvelope,
        *,
        run_id: str,
        context_id: str,
        task_id: str,
        props: IacCodeProps,
        cwd: str,
    ) -> dict[str, Any]:
        """The A2A message that carries one answer, in the runtime's form."""
        if envelope.is_permission:
            part = permission_part(envelope.fields, answer.decision)
        else:
            part = {"text": answer_text(answer)}
        return answer_message(
            message_id=f"{run_id}-{answer.interrupt_id}",
            context_id=context_id,
            task_id=envelope.request_task_id or task_id,
            part=part,
            props=props,
            cwd=cwd,
        )

    async def send_sideband(self, message: dict[str, Any]) -> None:
        """An answer sent with ``SendMessage``: the runtime acknowledges it
        and the task works on (followed afterwards)."""
        try:
            reply = await self.client.send_message(message)
        except A2ARpcError as exc:
            raise AnswerRefused(str(exc)) from exc
        ack = acknowledgement(reply)
        if ack is not None and ack.get("accepted") is False:
            raise AnswerRefused(f"the runtime did not accept {ack.get('inputId')}")

    def stream(self, message: dict[str, Any]) -> Batches:
        """``SendStreamingMessage``: the runtime's results, a network chunk at a time."""
        return self.client.stream_message_batches(message)

    def subscribe(self, task_id: str) -> Batches:
        """``SubscribeToTask`` on a task that works."""
        return self.client.subscribe_batches(task_id)

    async def cancel_task(self, task_id: str | None) -> bool:
        """Ask the runtime to cancel a task; never raises."""
        if task_id is None:
            return False
        try:
            # Shielded: this often runs while the caller is being cancelled.
            await asyncio.shield(self.client.cancel_task(task_id))
        except (A2AError, asyncio.CancelledError) as exc:
            log.info("cancel of A2A task %s not confirmed: %s", task_id, type(exc).__name__)
            return False
        return True



#: States of a task that goes on by itself.
_RUNNING_STATES: Final = frozenset({wire.SUBMITTED, wire.WORKING})


def _still_runs(task: dict[str, Any]) -> bool:
    """Whether ``task`` works, or waits for an input (iac-code leaves a
    finished turn ``INPUT_REQUIRED`` with nothing asked)."""
    state = (task.get("status") or {}).get("state")
    if state in _RUNNING_STATES:
        return True
    if state not in (wire.INPUT_REQUIRED, wire.AUTH_REQUIRED):
        return False
    iac = (task.get("metadata") or {}).get(wire.IAC_CODE_KEY) or {}
    return bool(iac.get("input") or iac.get("pendingPermissions"))
