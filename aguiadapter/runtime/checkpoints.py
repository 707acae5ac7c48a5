"""A permission the runtime raised while no stream of ours followed it,
read from the folder of a co-located ``iac-code a2a``.

When the adapter dies while the runtime carries out an answer, the runtime
may go on to the next permission of the turn with nobody listening. None
of its A2A reads names that input afterwards: ``GetTask`` is frozen at the
task's first input, the execution route names no input, the transcript has
the waiting tool call but not the input's id, and ``SubscribeToTask`` is
refused. Its ids are on disk only: iac-code keeps one checkpoint per
permission wait, ``projects/<workspace>/<session>/permission-waits/pwb_*.json``
under its config folder, with ``inputId``, ``toolUseId``, ``taskId`` and
``phase``. An adapter that shares that folder (the default: both use
``$IAC_CODE_CONFIG_DIR``, and ``--spawn-iac-code``) reads them here; one in
front of a remote runtime finds none, and the run ends ``EXECUTION_LOST``.

:func:`waiting_permission` is pure (a checkpoint and the transcript's tool
call in, an input envelope out); :func:`read_checkpoints` is the file edge.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from .envelope import InputEnvelope, envelope_of
from .tool_summary import question_subject, safe_summary

log = logging.getLogger(__name__)

#: What a session id of iac-code looks like (anything else is never a path part).
_SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
#: At most this many checkpoint files are read per look (a session keeps one per permission).
MAX_CHECKPOINTS: Final = 256
_OPTIONS: Final = ({"id": "allow_once", "label": "Allow once"}, {"id": "deny", "label": "Deny"})


def read_checkpoints(config_dir: Path, session_id: str) -> list[dict[str, Any]]:
    """The permission-wait checkpoints of one session under an iac-code
    config folder (blocking: call it off the event loop). Unreadable files
    are skipped."""
    if not _SESSION_ID.fullmatch(session_id):
        return []
    found: list[dict[str, Any]] = []
    for folder in (config_dir / "projects").glob(f"*/{session_id}/permission-waits"):
        for path in sorted(folder.glob("pwb_*.json"))[:MAX_CHECKPOINTS]:
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                log.info("permission checkpoint %s not read: %s", path.name, type(exc).__name__)
                continue
            if isinstance(record, dict):
                found.append(record)
    return found


def waiting_permission(
    checkpoints: Sequence[Mapping[str, Any]], task_id: str, context_id: str, tool_use: Mapping[str, Any]
) -> InputEnvelope | None:
    """The envelope of the permission that waits for the transcript's tool
    call ``tool_use`` (``{id, name, input}``), as iac-code would have
    announced it: the ids an answer must echo, and a prompt built from the
    call (its own words were in the update nobody read; see
    :mod:`.tool_summary`), marked ``rebuilt``."""
    tool_use_id = tool_use.get("id")
    for record in checkpoints:
        if (
            record.get("phase") == "WAITING"
            and record.get("taskId") == task_id
            and record.get("contextId") == context_id
            and record.get("toolUseId") == tool_use_id
            and isinstance(record.get("inputId"), str)
        ):
            tool_name = str(record.get("toolName") or tool_use.get("name") or "tool")
            tool_input = tool_use.get("input")
            summary = safe_summary(tool_name, tool_input)
            subject = question_subject(tool_name, tool_input)
            fields = {
                "schemaVersion": 1,
                "kind": "permission",
                "inputId": record["inputId"],
                "toolUseId": tool_use_id,
                "requestTaskId": task_id,
                "contextId": context_id,
                "toolName": tool_name,
                "required": True,
                "title": f"Run {tool_name}",
                "prompt": f"Allow once? {subject}" if subject else f"{summary} Allow once?",
                "safeSummary": summary,
                "options": [dict(option) for option in _OPTIONS],
                # The runtime's own words were never read: these are the adapter's.
                "rebuilt": True,
            }
            return envelope_of(fields)
    return None

