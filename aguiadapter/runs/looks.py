"""Looking at a thread's task, as a run and the process's recovery both do
(written once here): viewing it from the thread's pipeline cursor, and
judging what it waits for, with the inputs no stream announced read where
the runtime keeps them when the first judgement says one waits."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from ..runtime.envelope import InputEnvelope
from ..runtime.evidence import TaskFate, TaskView
from ..runtime.iac_code import IacCodeRuntime
from ..translate.pipeline import PipelineState

_J = TypeVar("_J")


def pipeline_cursor(pipeline: PipelineState | None, waiting: Iterable[int] = ()) -> int | None:
    """Where a look at the task's pipeline starts: before the earliest of
    the inputs that wait (each by the sequence it was raised after: their
    resolution must be seen), else after the last event the thread saw;
    ``None`` outside a pipeline."""
    if pipeline is None or pipeline.pipeline_run_id is None:
        return None
    return min(waiting, default=pipeline.last_sequence)


async def view_task(
    runtime: IacCodeRuntime, task_id: str, context_id: str, pipeline: PipelineState | None, *,
    waiting: Iterable[int] = (), transcript: bool = False,
) -> TaskView:
    """The task now, from the thread's pipeline cursor (:func:`pipeline_cursor`;
    ``transcript``: with the session's transcript outside a pipeline)."""
    after = pipeline_cursor(pipeline, waiting)
    return await runtime.view(task_id, context_id, pipeline_after=after, transcript=transcript)


async def judge_with_unseen(
    runtime: IacCodeRuntime,
    view: TaskView,
    session_id: str | None,
    known: Sequence[InputEnvelope],
    judge: Callable[[Sequence[InputEnvelope]], _J],
    fate: Callable[[_J], TaskFate],
) -> _J:
    """Judge the task's view by the inputs known; when the judgement says it
    waits for an input no stream announced (``UNSEEN``), read those inputs
    where the runtime keeps them and judge again."""
    judged = judge(known)
    if fate(judged) is TaskFate.UNSEEN:
        judged = judge([*known, *await runtime.unseen_inputs(view, session_id)])
    return judged
