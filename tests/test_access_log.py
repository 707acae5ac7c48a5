"""The access log writes aiohttp's line (web/access_log.py): the same text
and the same ``extra`` fields for aiohttp's default format, at less cost;
any other format is aiohttp's own. The text log's time, made once a
second, reads as the logging module's."""

from __future__ import annotations

import logging
import time
from typing import Any
from unittest import mock

import pytest
from aiohttp import web
from aiohttp import HttpVersion10
from aiohttp.test_utils import make_mocked_request
from aiohttp.web_log import AccessLogger

from aguiadapter.logs import KeyValueFormatter
from aguiadapter.web.access_log import AccessLog

EXTRA_KEYS = ("remote_address", "request_start_time", "first_request_line", "response_status", "response_size",
              "request_header")


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _request(method: str, path: str, headers: dict[str, str], peer: Any, version: Any = None) -> web.BaseRequest:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: peer if name == "peername" else default
    kwargs: dict[str, Any] = {"headers": headers, "transport": transport}
    if version is not None:
        kwargs["version"] = version
    return make_mocked_request(method, path, **kwargs)


def _lines(logger_class: type[AccessLogger], request: web.BaseRequest, response: web.StreamResponse,
           log_format: str = AccessLogger.LOG_FORMAT) -> logging.LogRecord:
    logger = logging.getLogger(f"test.access.{logger_class.__name__}")
    logger.propagate = False
    kept = Kept()
    logger.handlers[:] = [kept]
    logger.setLevel(logging.INFO)
    logger_class(logger, log_format).log(request, response, 0.25)
    (record,) = kept.records
    return record


CASES = [
    ("POST", "/", {"User-Agent": "curl/8", "Referer": "http://app.example/chat"}, ("127.0.0.1", 50000), None),
    ("GET", "/threads?limit=5&after=x%20y", {}, ("::1", 1, 0, 0), None),
    ("GET", "/health", {"User-Agent": "probe 100% \"quoted\""}, None, None),
    ("POST", "/connect", {}, ("10.0.0.7", 4), HttpVersion10),
]


@pytest.mark.parametrize(("method", "path", "headers", "peer", "version"), CASES)
def test_the_line_and_its_fields_are_aiohttp_s(method: str, path: str, headers: dict[str, str], peer: Any,
                                              version: Any) -> None:
    request = _request(method, path, headers, peer, version)
    response = web.Response(status=409, body=b"x" * 292)
    # Both within one second: the time's text is the same for both.
    while time.time() % 1 > 0.5:
        time.sleep(0.05)
    ours = _lines(AccessLog, request, response)
    theirs = _lines(AccessLogger, request, response)
    assert ours.getMessage() == theirs.getMessage()
    assert {key: getattr(ours, key) for key in EXTRA_KEYS} == {key: getattr(theirs, key) for key in EXTRA_KEYS}
    assert ours.levelno == theirs.levelno == logging.INFO


def test_another_format_is_aiohttp_s_own() -> None:
    request = _request("GET", "/threads", {"User-Agent": "curl/8"}, ("127.0.0.1", 1))
    response = web.Response(status=200, body=b"[]")
    log_format = '%a "%r" %s %Tf'
    ours = _lines(AccessLog, request, response, log_format)
    theirs = _lines(AccessLogger, request, response, log_format)
    assert ours.getMessage() == theirs.getMessage()


def test_the_text_log_s_time_reads_as_logging_s_across_seconds() -> None:
    ours = KeyValueFormatter("%(asctime)s %(message)s")
    theirs = logging.Formatter("%(asctime)s %(message)s")
    # Within one second, into the next, back to an earlier one (a clock set back), a minute later.
    for created in (1_765_000_000.001, 1_765_000_000.999, 1_765_000_001.5, 1_765_000_000.25, 1_765_000_061.0):
        record = logging.LogRecord("x", logging.INFO, "", 0, "m", None, None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert ours.formatTime(record) == theirs.formatTime(record)
        assert ours.formatTime(record, "%H:%M") == theirs.formatTime(record, "%H:%M")
