"""A request body is JSON by RFC 8259, in UTF-8, or it is INVALID_JSON."""

from __future__ import annotations

import codecs
import json

import pytest

from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.i18n import render_error
from aguiadapter.protocol.request_json import decode_request_json

BODY = {"threadId": "t", "text": "创建一个 VPC 模板 😀", "n": [1, 2.5, -0.0, 1e308, None, True]}


def refused(body: bytes) -> AdapterError:
    with pytest.raises(AdapterError) as caught:
        decode_request_json(body)
    assert caught.value.code is ErrorCode.INVALID_JSON
    return caught.value


def test_utf_8_json_is_read() -> None:
    assert decode_request_json(json.dumps(BODY, ensure_ascii=False).encode()) == BODY


def test_a_utf_8_byte_order_mark_is_tolerated() -> None:
    assert decode_request_json(codecs.BOM_UTF8 + json.dumps(BODY).encode()) == BODY


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(literal: str) -> None:
    error = refused(f'{{"threadId": "t", "state": {{"x": {literal}}}}}'.encode())
    assert error.message_id == "invalid_json_number"
    assert "NaN" in render_error(error, "en") and "NaN" in render_error(error, "zh-CN")


@pytest.mark.parametrize("number", ["1e309", "-1e400", "1" * 400 + ".0"])
def test_a_number_beyond_a_double_is_refused_rather_than_read_as_infinity(number: str) -> None:
    assert refused(f'{{"x": {number}}}'.encode()).message_id == "invalid_json_number"


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"])
def test_other_unicode_encodings_are_refused(codec: str) -> None:
    error = refused(json.dumps(BODY).encode(codec))
    assert error.message_id == "invalid_json_encoding"
    assert render_error(error, "en") == "The request body must be JSON encoded in UTF-8."


def test_latin_1_is_refused() -> None:
    assert refused('{"text": "été"}'.encode("latin-1")).message_id == "invalid_json_encoding"


@pytest.mark.parametrize(
    "body",
    [b"", b"{", b'{"a": 1} {"b": 2}', b"{'a': 1}", b'{"a": 1,}', b'{"a": "\x01"}', b"[" * 100_000],
    ids=["empty", "truncated", "two values", "single quotes", "trailing comma", "raw control character",
         "nested too deep"],
)
def test_malformed_json_is_refused(body: bytes) -> None:
    assert refused(body).message_id == "invalid_json"


def test_a_lone_surrogate_escape_is_refused() -> None:
    assert refused(b'{"text": "hi \\ud800"}').message_id == "invalid_json_unicode"


def test_a_surrogate_pair_escape_is_text() -> None:
    assert decode_request_json(b'{"text": "\\ud83d\\ude00"}') == {"text": "\U0001f600"}
