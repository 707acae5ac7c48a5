"""The OpenAPI document, whose request schemas are the input schema itself.

``aguiadapter/web/openapi.json`` is written by hand (paths, responses, the
schemas of the events, examples) except for the components that describe
request bodies: those are copied from :data:`~aguiadapter.protocol.input_schema.INPUT_SCHEMAS`,
the definition the server checks requests against. After a change there::

    python -m aguiadapter.web.openapi --write

A test fails while the committed document is not what this writes.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from ..protocol.input_schema import INPUT_SCHEMAS

__all__ = ["DOCUMENT", "main", "render_document", "render_text"]

DOCUMENT: Final = Path(__file__).with_name("openapi.json")
"""The packaged document (served at ``GET /openapi.json``)."""


def render_document(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with its input components replaced by the definition's.

    The generated components come first, in the definition's order; the
    others keep theirs.
    """
    components = document.get("components", {})
    current = components.get("schemas", {})
    generated = copy.deepcopy(INPUT_SCHEMAS)
    schemas = {**generated, **{name: schema for name, schema in current.items() if name not in generated}}
    return {**document, "components": {**components, "schemas": schemas}}


def render_text(document: dict[str, Any]) -> str:
    """The document as the repository keeps it: two-space indent, UTF-8 as is."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aguiadapter.web.openapi [--write | --check] [FILE]``."""
    parser = argparse.ArgumentParser(prog="python -m aguiadapter.web.openapi", description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="update the document in place")
    action.add_argument("--check", action="store_true", help="exit 1 when the document is not current")
    parser.add_argument("file", nargs="?", type=Path, default=DOCUMENT)
    args = parser.parse_args(argv)
    before = args.file.read_text(encoding="utf-8")
    after = render_text(render_document(json.loads(before)))
    if args.write:
        if after != before:
            args.file.write_text(after, encoding="utf-8")
        print(f"{args.file}: {'updated' if after != before else 'already current'}")
        return 0
    if args.check:
        if after != before:
            print(f"{args.file} is stale: run python -m aguiadapter.web.openapi --write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(after)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
