"""docs/ui-guide.md tells a front end what to do for every error code it can meet."""

from __future__ import annotations

from pathlib import Path

from aguiadapter.errors import ErrorCode

PAGE = Path(__file__).resolve().parents[2] / "docs" / "ui-guide.md"


def test_every_error_code_has_a_what_to_do() -> None:
    rows: dict[str, str] = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) == 4 and cells[1].startswith("`") and cells[1].strip("`").isupper():
            rows[cells[1].strip("`")] = cells[2]
    missing = [code.name for code in ErrorCode if len(rows.get(code.name, "")) < 10]
    assert missing == [], f"no what-to-do in docs/ui-guide.md for {missing}"


def test_every_interrupt_kind_the_runtime_sends_has_a_row() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for kind in ("permission", "ask_user_question", "candidate_selection"):
        assert f"| `{kind}`" in text, kind
