"""Where a look at a thread's task starts in its pipeline (:mod:`aguiadapter.runs.looks`),
the one rule the runs and the recovery share."""

from __future__ import annotations

from aguiadapter.runs.looks import pipeline_cursor
from aguiadapter.translate.pipeline import PipelineState


def test_a_look_outside_a_pipeline_reads_no_pipeline_events() -> None:
    assert pipeline_cursor(None) is None
    assert pipeline_cursor(PipelineState(last_sequence=12), [3]) is None, "no pipeline run: no cursor"


def test_a_look_starts_before_the_earliest_input_that_waits_else_after_the_last_event_seen() -> None:
    pipeline = PipelineState(pipeline_run_id="p-1", last_sequence=12)
    assert pipeline_cursor(pipeline) == 12
    # An answer's resolution lies after the input it answers: the look must see it.
    assert pipeline_cursor(pipeline, [9, 4, 11]) == 4
