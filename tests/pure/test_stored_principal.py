"""A stored record's owner, read from its bytes without parsing it (issue 34, item 5)."""

from __future__ import annotations

import pytest

from aguiadapter.threads.record import RunEntry, ThreadRecord, record_to_json, stored_principal


@pytest.mark.parametrize("principal", ["alice", None, 'quo"te\\d \u00e9\u4e2d'])
def test_the_owner_is_read_from_the_top_level_line(principal: str | None) -> None:
    record = ThreadRecord(thread_id="t", context_id="c", cwd="/w", principal=principal)
    # Values and nested keys spelling the line are not the owner.
    record.runs['\n  "principal": "mallory",'] = RunEntry("d")
    record.last_error = '\n  "principal": "mallory",\n'
    assert stored_principal(record_to_json(record)) == (True, principal)


@pytest.mark.parametrize("data", [b'{"principal":"alice"}', b"", b'{\n  "principal": [1],\n}',
                                  b'{\n  "principal": "unterminated\n}'])
def test_a_layout_that_does_not_say_is_parsed_instead(data: bytes) -> None:
    assert stored_principal(data) == (False, None)
