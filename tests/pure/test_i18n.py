"""The message catalogs and the choice of language."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.i18n import (
    CATALOGS,
    SUPPORTED_LANGUAGES,
    negotiate_language,
    render,
    render_error,
)

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "aguiadapter"


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def message_ids_in_source() -> set[str]:
    """Every ``input_*`` string literal in the source of the request checks."""
    found: set[str] = set()
    checks = ("input_schema", "refusals", "content", "parsing", "request_json")
    for path in (*(PACKAGE_DIR / "protocol" / f"{name}.py" for name in checks), PACKAGE_DIR / "workspace.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(r"input_[a-z0-9_]+", value):
                found.add(value)
    return found


# --- the catalogs ---------------------------------------------------------------


def test_catalogs_exist_for_every_supported_language() -> None:
    assert SUPPORTED_LANGUAGES == ("en", "zh-CN")
    assert set(CATALOGS) == set(SUPPORTED_LANGUAGES)


def test_both_catalogs_define_the_same_message_ids() -> None:
    assert set(CATALOGS["en"]) == set(CATALOGS["zh-CN"])


@pytest.mark.parametrize("message_id", sorted(CATALOGS["en"]))
def test_both_catalogs_use_the_same_placeholders(message_id: str) -> None:
    assert placeholders(CATALOGS["en"][message_id]) == placeholders(CATALOGS["zh-CN"][message_id])


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda code: code.name)
def test_every_error_code_has_a_message_without_placeholders(code: ErrorCode) -> None:
    for language in SUPPORTED_LANGUAGES:
        template = CATALOGS[language][code.message_id]
        assert template.strip()
        # Raised as one line with no params, so a default message needs none.
        assert placeholders(template) == set()


def test_every_message_id_the_validators_use_has_a_message() -> None:
    used = message_ids_in_source()
    # The scan sees digits, the schema's x-refusal values and the workspace checks.
    assert {"input_image_bad_base64", "input_credential_not_ascii", "input_cwd_symlink_loop"} <= used
    assert used - set(CATALOGS["en"]) == set()


def test_chinese_messages_are_chinese() -> None:
    for message_id, template in CATALOGS["zh-CN"].items():
        assert re.search(r"[\u4e00-\u9fff]", template), message_id


# --- rendering --------------------------------------------------------------------


def test_render_formats_the_placeholders() -> None:
    assert render("input_field_missing", "en", path="runId") == "Required field runId is missing."
    assert render("input_field_missing", "zh-CN", path="runId") == "缺少必填字段 runId。"


def test_render_never_raises_on_a_missing_parameter() -> None:
    assert render("input_field_missing", "en") == "Required field {path} is missing."


def test_render_falls_back_to_english_for_an_unknown_language() -> None:
    assert render("thread_busy", "fr") == CATALOGS["en"]["thread_busy"]


def test_render_of_an_unknown_id_is_the_id() -> None:
    assert render("no_such_message", "zh-CN") == "no_such_message"


def test_render_error_uses_the_specific_message_and_its_params() -> None:
    error = AdapterError(ErrorCode.INVALID_INPUT, "input_expected_string", path="threadId")
    assert render_error(error, "en") == "threadId must be a string."
    assert render_error(error, "zh-CN") == "threadId 必须是字符串。"


def test_render_error_without_message_id_uses_the_code_default() -> None:
    assert (
        render_error(AdapterError(ErrorCode.THREAD_BUSY), "zh-CN")
        == (CATALOGS["zh-CN"]["thread_busy"])
    )


def test_render_error_with_an_unknown_message_id_falls_back_to_the_code_default() -> None:
    error = AdapterError(ErrorCode.INVALID_INPUT, "written_by_someone_else")
    assert render_error(error, "en") == "Invalid AG-UI RunAgentInput envelope."


# --- negotiation --------------------------------------------------------------------

NEGOTIATION = [
    # (preferredLanguage, Accept-Language, chosen)
    (None, None, "en"),
    ("zh-CN", None, "zh-CN"),
    ("zh-CN", "en", "zh-CN"),  # preferred beats the header
    ("en", "zh-CN", "en"),
    ("zh_cn", None, "zh-CN"),
    ("ZH-Hans", None, "zh-CN"),
    ("en-GB", "zh-CN", "en"),
    ("fr", "zh-CN", "zh-CN"),  # an unsupported preference defers to the header
    ("", "zh-CN", "zh-CN"),
    (None, "zh-CN", "zh-CN"),
    (None, "zh", "zh-CN"),
    (None, "zh-Hans", "zh-CN"),
    (None, "zh-TW", "zh-CN"),  # the only Chinese catalog
    (None, "en-US,en;q=0.9,zh-CN;q=0.8", "en"),
    (None, "zh-CN,zh;q=0.9,en;q=0.8", "zh-CN"),
    (None, "en;q=0.2, zh;q=0.3", "zh-CN"),  # weights, not order
    (None, "fr, zh;q=0.5", "zh-CN"),
    (None, "fr, de", "en"),
    (None, "*", "en"),
    (None, "*;q=0.5, en;q=0", "zh-CN"),  # q=0 means not acceptable
    (None, "zh-CN;q=0, en;q=0", "en"),  # nothing acceptable: the default
    (None, "zh;q=0, en;q=0.1", "en"),
    (None, "EN;Q=1, ZH-CN;Q=0.5", "en"),
    (None, "zh-CN;q=abc, en;q=0.1", "en"),  # a bad weight drops its range
    (None, "zh-CN;q=1.5, en;q=0.1", "en"),
    (None, "zh-CN;level=1;q=0.9, en;q=0.1", "zh-CN"),
    (None, "", "en"),
    (None, ";;;,,,", "en"),
    (None, "\x00\xff garbage", "en"),
    (None, "en" * 5000, "en"),
    (None, "x-klingon, " * 2000 + "zh", "en"),  # ranges past the limit are ignored
]


@pytest.mark.parametrize(("preferred", "header", "chosen"), NEGOTIATION)
def test_negotiate_language(preferred: str | None, header: str | None, chosen: str) -> None:
    assert negotiate_language(preferred, header) == chosen


@pytest.mark.parametrize("garbage", [123, b"zh-CN", ["zh-CN"], object()])
def test_negotiate_language_survives_values_that_are_not_strings(garbage: object) -> None:
    assert negotiate_language(garbage, garbage) == "en"  # type: ignore[arg-type]
