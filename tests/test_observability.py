"""One log line per run, and no secret in any log."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.logs import (
    KNOWN_SECRETS,
    JsonFormatter,
    KeyValueFormatter,
    KnownSecrets,
    _PATTERN_NEEDS,
    _SECRET_PATTERNS,
    RedactingFilter,
    _folded,
    configure_logging,
    log_fields,
    redact,
    secrets_hidden,
)
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


def _every_pattern(text: str) -> str:
    """What redact did before it skipped the patterns a text cannot match."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda match: match.group(1) + "***" + ("@" if match.group().endswith("@") else ""), text)
    return text


def test_no_character_the_patterns_read_as_a_needed_letter_is_missed() -> None:
    """redact skips a pattern when the lowercased text lacks what it needs:
    every character the regex engine matches case-insensitively to a letter
    of those needs must lowercase to it (the Kelvin sign, the long s)."""
    everything = "".join(chr(code) for code in range(sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF)
    for letter in sorted({char for _, needs in _PATTERN_NEEDS for need in needs for char in need if char.isalpha()}):
        for char in re.findall(f"(?i){letter}", everything):
            assert _folded(char) == letter, (letter, hex(ord(char)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([
    "Bearer ", "BEARER\t", "api_key", "ApiKey", "\u212aey", "\u017fecret", "SECRET", "passwd", "PassWord", "token",
    "securityToken", "accessKeySecret", "sk-", "SK-", "://", "https://", "user:pw@", "@", "=", ": ", '"', "'",
    "abcdefgh12", "x", " ", "\n", "-", "_", "tok", "en", "ke", "y",
]), max_size=12).map("".join))
def test_redact_masks_what_every_pattern_masks(text: str) -> None:
    assert redact(text) == _every_pattern(text)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_field_line_shows_no_credential_in_either_form(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The text form masks a log_fields line's fields inside its message
    only (they show nowhere else); the JSON form masks them as keys."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("INFO", fmt)
        log_fields(logging.getLogger("aguiadapter.test"), logging.INFO, "run ended",
                   {"thread": "t-1", "error": "token=hunter2hunter2", "url": "https://bob:pw1234@host/x"})
        logging.getLogger("aguiadapter.test").info("plain", extra={"fields": {"note": "password: hunter3hunter3"}})
    finally:
        root.handlers[:], root.level = handlers, level
        logging.captureWarnings(False)
    written = capsys.readouterr().err
    assert "t-1" in written and "run ended" in written and "plain" in written
    assert not any(secret in written for secret in ("hunter2", "pw1234", "hunter3")), written


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


def _failing_record(message: str) -> logging.LogRecord:
    try:
        raise RuntimeError(message)
    except RuntimeError:
        return logging.LogRecord("aguiadapter.test", logging.ERROR, __file__, 1, "the runtime failed", None,
                                 sys.exc_info())


@pytest.mark.parametrize("formatter", [KeyValueFormatter("%(levelname)s %(name)s: %(message)s"), JsonFormatter()],
                         ids=["text", "json"])
def test_a_traceback_is_redacted_in_both_formats(formatter: logging.Formatter) -> None:
    key = "provider-key-5e1d0c77"
    with secrets_hidden([key]):
        record = _failing_record(f"provider refused {key}; retry with api_key=sk_live_abcdef")
        other = logging.Formatter()
        other.format(record)  # another handler first: record.exc_text now holds the traceback as it is
        formatted = formatter.format(record)
    assert "RuntimeError: provider refused ***" in formatted and "Traceback" in formatted
    assert key not in formatted and "sk_live_abcdef" not in formatted


@pytest.mark.parametrize("formatter", [KeyValueFormatter("%(levelname)s %(name)s: %(message)s"), JsonFormatter()],
                         ids=["text", "json"])
def test_a_secret_the_process_was_given_is_masked_outside_the_request_that_gave_it(
    formatter: logging.Formatter,
) -> None:
    key, short = "cloud-secret-9a8b7c6d", "abc1234"  # the short one: too common to mask process-wide
    KNOWN_SECRETS.remember([key, short])
    try:
        record = _failing_record(f"expiry: the runtime quoted {key} and {short}")
        record.msg = f"interrupt expired; cancel answered {key}"
        RedactingFilter().filter(record)
        formatted = formatter.format(record)
    finally:
        KNOWN_SECRETS.forget_all()
    assert key not in formatted and "cancel answered ***" in formatted and "quoted *** and abc1234" in formatted


def test_the_known_secrets_are_bounded_and_the_most_recent_kept() -> None:
    known = KnownSecrets(max_values=3, max_chars=1000)
    known.remember(f"secret-value-{n:04d}" for n in range(10))
    known.remember(["secret-value-0007"])  # given again: kept longer
    known.remember(["secret-value-xyz1"])
    assert len(known) == 3
    text = " ".join(f"secret-value-{n:04d}" for n in range(10)) + " secret-value-xyz1"
    assert known.found_in(text) == {"secret-value-0007", "secret-value-0009", "secret-value-xyz1"}
    by_size = KnownSecrets(max_values=100, max_chars=50)
    by_size.remember(["x" * 20 + str(n) for n in range(5)])
    assert len(by_size) == 2
    by_size.remember(["y" * 51])  # longer than everything kept: never kept
    assert len(by_size) == 2
