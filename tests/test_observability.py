"""One log line per run, and no secret in any log."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.logs import JsonFormatter, KeyValueFormatter, RedactingFilter, redact
from tests.support.adapter import run_body, start_adapter
from tests.support.agui import check_stream, interrupts_of


async def test_each_run_logs_one_line_with_its_identifiers_and_outcome(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    running = await start_adapter(tmp_path / "s", demo.url)
    secret = "sk-" + "a1b2c3d4e5f6g7h8"
    try:
        with caplog.at_level(logging.DEBUG):
            await running.run(run_body(thread_id="log-1", text="hello", cwd=str(workspace), llmApiKey=secret))
            await running.run(run_body(thread_id="log-2", text="fail", cwd=str(workspace)))
    finally:
        await running.close()
    lines = [r for r in caplog.records if getattr(r, "event", None) == "run ended"]
    assert [r.fields["outcome"] for r in lines] == ["success", "A2A_EXECUTION_FAILED"]  # type: ignore[attr-defined]
    fields = lines[0].fields  # type: ignore[attr-defined]
    assert fields["thread"] == "log-1" and fields["run"].startswith("run-") and fields["execution"].startswith("exec-")
    assert fields["events"] >= 4 and fields["duration_ms"] >= 0
    everything = "\n".join(KeyValueFormatter().format(r) + JsonFormatter().format(r) for r in caplog.records)
    assert secret not in everything


async def test_a_record_stays_one_line_whatever_the_ids_hold(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    running = await start_adapter(tmp_path / "s", demo.url)
    forged = "t\n2026-01-01 00:00:00,000 ERROR aguiadapter: forged\r\u2028line"
    try:
        with caplog.at_level(logging.DEBUG):
            await running.run(run_body(thread_id=forged, text="hello", cwd=str(workspace), run_id="r\n1"))
            await running.run(run_body(thread_id=forged, text="fail", cwd=str(workspace)))
    finally:
        await running.close()
    records = [r for r in caplog.records
               if forged in r.getMessage() or forged in (getattr(r, "fields", None) or {}).values()]
    assert records, "the id appears in the run's records"
    for record in caplog.records:
        for formatted in (KeyValueFormatter("%(levelname)s %(name)s: %(message)s").format(record),
                          JsonFormatter().format(record)):
            if record.exc_info is None:
                assert len(formatted.splitlines()) == 1, formatted
    text = KeyValueFormatter().format(records[0])
    assert "forged" in text and "\\n" in text


@pytest.mark.parametrize(
    "line",
    [
        "Authorization: Bearer abc.def-123",
        'body {"llmApiKey": "sk-live-0123456789"}',
        "accessKeySecret=very-secret-value",
        'securityToken: "sts-token-value"',
    ],
)
def test_credential_shaped_text_is_masked(line: str) -> None:
    masked = redact(line)
    assert "***" in masked
    assert not any(value in masked for value in ("abc.def-123", "0123456789", "very-secret-value", "sts-token-value"))


def test_the_redacting_filter_rewrites_the_record() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "token=%s", ("hunter2hunter2",), None)
    RedactingFilter().filter(record)
    assert "hunter2" not in record.getMessage()
    assert json.loads(JsonFormatter().format(record))["message"] == "token=***"


async def test_under_plain_logging_the_fields_show_and_the_happy_resume_logs_no_failure(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A host's logging.basicConfig formatter: the run's fields are in the
    message, none prints None, and a resume on the demo says nothing at INFO
    that reads like a failure."""
    running = await start_adapter(tmp_path / "s", demo.url)
    try:
        with caplog.at_level(logging.INFO):
            events = check_stream((await running.run(run_body(thread_id="plain", text="permission", cwd=str(workspace)))).body)
            (interrupt,) = interrupts_of(events)
            body = run_body(thread_id="plain", text=None, cwd=str(workspace))
            body["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
            assert check_stream((await running.run(body)).body)[-1]["type"] == "RUN_FINISHED"
    finally:
        await running.close()
    plain = logging.Formatter(logging.BASIC_FORMAT)
    lines = [plain.format(r) for r in caplog.records if r.name.startswith("aguiadapter")]
    ended = [line for line in lines if "run ended" in line]
    assert len(ended) == 2 and all("thread=plain" in line and "outcome=" in line for line in ended), ended
    assert not any("None" in line for line in lines), lines
    assert not any("not read" in line for line in lines), lines
