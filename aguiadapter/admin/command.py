"""``aguiadapter threads list|show|cancel|delete``: parsing and output.

The settings (``--store``, ``--state-dir``, ``--config-dir``, ``--a2a-url``,
``--a2a-token``, log options) are the server's own options, taken from the
server's parser with their environment variables, and the whole namespace
starts from the server's defaults: the server's ``config_from_args`` then
makes the same :class:`~aguiadapter.config.Config` a server started with the
same options and environment would use. Both come from
:mod:`aguiadapter.cli`, which calls :func:`main` (and is not imported here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..cli_help import Parser, usage_error
from ..config import Config
from ..logs import configure_logging
from ..threads.listing import MAX_LIMIT, ThreadSummary
from ..threads.record import RunPhase, ThreadRecord, ThreadState
from .control import ask_server
from .operations import Cancelled, Listing, Refused, ThreadAdmin

#: The server's options the command reads (by ``dest``).
SETTINGS = ("store", "state_dir", "config_dir", "a2a_url", "a2a_token", "log_level", "log_format")

DESCRIPTION = """\
Operator command: find, inspect, cancel and delete threads, on the file store
or on Redis while replicas run. It reads the same settings as the server
(--store, --state-dir, IAC_CODE_AGUI_* variables) and goes through the
store's claims: a run another process streams is cancelled there, over the
same signal as the HTTP cancel route; a thread with a live run is never
deleted behind its back. On the file store (one process owns it) the
command asks a running server to cancel or delete, over the server's
control socket (<state-dir>/admin.sock, its own OS user only)."""

EPILOG = """\
exit status: 0 done; 1 not found, refused, or the store does not answer; 2 usage error.
examples:
  aguiadapter threads list --store redis://redis:6379/0 --state running --older-than 15m
  aguiadapter threads list --user alice@example.com --state interrupted --json
  aguiadapter threads show thread-1 --user alice@example.com
  aguiadapter threads cancel thread-1 --user alice@example.com --a2a-url http://runtime:8080/
  aguiadapter threads delete thread-1 --user alice@example.com
See "Finding and clearing a stuck thread" in docs/operations.md."""

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_STATES = tuple(state.value for state in ThreadState)

#: The server's parser, and its way from parsed options to a Config (both of ``aguiadapter.cli``).
ServerParser = Callable[[Mapping[str, str]], argparse.ArgumentParser]
ToConfig = Callable[[argparse.Namespace, Mapping[str, str]], Config]


def duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h`` or ``7d`` as seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration (90s, 15m, 2h, 7d): {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= 100 * MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {100 * MAX_LIMIT}, not {value}")
    return value


def build_parser(server_parser: ServerParser, env: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    """The command's parser; the settings are the server parser's own options."""
    server = server_parser(env)
    shared = [action for action in server._actions if action.dest in SETTINGS]
    parser = Parser(prog="aguiadapter threads", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    actions = parser.add_subparsers(dest="action", required=True, metavar="{list,show,cancel,delete}",
                                    parser_class=Parser)

    def add(name: str, summary: str, *, thread: bool = True) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=summary, description=summary, epilog=EPILOG, allow_abbrev=False,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        if thread:
            sub.add_argument("thread", metavar="THREAD",
                             help="the thread id as the client sent it (with --user for a verified user's "
                             "thread), or a store key as `list` shows it (u/<hash>/<threadId>)")
        sub.add_argument("--user", metavar="PRINCIPAL", default=None,
                         help="the verified user, as the identity provider names them (the value of the "
                         "--jwt-principal-claim claim); the command finds that user's threads itself")
        sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
        settings = sub.add_argument_group("settings (the server's options and variables)")
        for action in shared:
            settings._add_action(action)
        return sub

    listing = add("list", "list threads, newest first: one user's, or every user's (reads every record)",
                  thread=False)
    listing.add_argument("--user-id", metavar="ID", default=None,
                         help="the threads a client started with this forwardedProps userId (servers "
                         "without verified identity)")
    listing.add_argument("--state", action="append", choices=_STATES, default=None,
                         help="only threads in this state (repeatable)")
    listing.add_argument("--older-than", type=duration, default=None, metavar="AGE",
                         help="only threads unchanged for AGE or longer (90s, 15m, 2h, 7d)")
    listing.add_argument("--limit", type=_limit, default=100, metavar="N", help="at most N threads (default 100)")
    add("show", "one thread: state, pending interrupts, runtime ids (task, context, session)")
    add("cancel", "cancel a thread's run or pending interrupts, and the runtime's task "
        "(with --a2a-url); a run another replica streams ends there with its terminal event")
    deleting = add("delete", "erase an idle or terminal thread: record, run logs, list entry, deadline "
                   "(the runtime keeps its session: the output says where)")
    deleting.add_argument("--wait", type=duration, default=0.0, metavar="SECONDS",
                          help="wait up to this long for a live run to end (default: refuse at once)")
    return parser


def main(
    argv: Sequence[str], server_parser: ServerParser, to_config: ToConfig, env: Mapping[str, str] = os.environ
) -> int:
    """``aguiadapter threads ...``; the exit status."""
    try:
        defaults = server_parser(env).parse_args([])
        args = build_parser(server_parser, env).parse_args(argv, namespace=defaults)
    except SystemExit as exc:
        if isinstance(exc.code, str):  # a bad environment variable
            return usage_error(exc.code.removeprefix("aguiadapter: "))
        return int(exc.code or 0)
    try:
        config = to_config(args, env)
    except ValueError as exc:
        return usage_error(str(exc))
    configure_logging(args.log_level, args.log_format)
    try:
        return asyncio.run(_run(args, ThreadAdmin.for_config(config)))
    except Refused as exc:
        return _refused(exc, args.json)
    except (OSError, RuntimeError) as exc:
        # The store cannot be opened (Redis unreachable, the redis extra missing, a folder not readable).
        return _refused(Refused(f"cannot open the store: {exc}", "unavailable"), args.json)


async def _run(args: argparse.Namespace, admin: ThreadAdmin) -> int:
    try:
        await admin.open()
        if args.action == "list":
            states = [ThreadState(state) for state in args.state or ()]
            listing = await admin.list_threads(principal=args.user, user_id=args.user_id, states=states,
                                               older_than=args.older_than, limit=args.limit)
            _print_list(listing, args.json)
            return 0
        if args.action == "show":
            record = await admin.find(args.thread, args.user)
            _emit(thread_json(record), args.json, _show_lines(record))
        elif args.action == "cancel":
            done = await (_cancelled_there(admin, args) if admin.read_only
                          else admin.cancel(await admin.find(args.thread, args.user)))
            _emit(_cancel_json(done), args.json, _cancel_lines(done))
        else:
            deleted = await (_deleted_there(admin, args) if admin.read_only
                             else admin.delete(await admin.find(args.thread, args.user), args.wait))
            kept = runtime_keeps(deleted, str(admin.config.runtime_config_dir or "<config-dir>"))
            runs = len(deleted.runs) + deleted.earlier_runs
            document = {"deleted": _ids(deleted), "runs": runs, "runtimeKeeps": kept}
            _emit(document, args.json, [f"deleted thread {deleted.thread_id} (key {deleted.key}): record, "
                                        "run logs, list entry, deadline",
                                        f"the runtime keeps: {kept}"])
        return 0
    finally:
        await admin.close()


async def _cancelled_there(admin: ThreadAdmin, args: argparse.Namespace) -> Cancelled:
    """The cancel done by the server that holds the file store (control.py)."""
    done = await ask_server(admin.config, "cancel", args.thread, args.user)
    assert isinstance(done, Cancelled)
    return done


async def _deleted_there(admin: ThreadAdmin, args: argparse.Namespace) -> ThreadRecord:
    """The delete done by the server that holds the file store (control.py)."""
    deleted = await ask_server(admin.config, "delete", args.thread, args.user, args.wait)
    assert isinstance(deleted, ThreadRecord)
    return deleted


# ------------------------------------------------------------------ output
def _when(at: float | None) -> str | None:
    return None if at is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _age(at: float | None, now: float) -> str:
    if at is None:
        return "-"
    seconds = max(0, int(now - at))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def summary_json(summary: ThreadSummary) -> dict[str, Any]:
    """One listed thread as ``--json`` prints it."""
    return {
        "threadId": summary.thread_id, "key": summary.key, "state": summary.state.value,
        "createdAt": _when(summary.created_at), "updatedAt": _when(summary.updated_at),
        "pendingInterrupts": summary.pending_interrupts, "activeRunId": summary.active_run_id,
        "lastError": summary.last_error,
    }


def _ids(record: ThreadRecord) -> dict[str, Any]:
    return {"threadId": record.thread_id, "key": record.key, "principal": record.principal,
            "userId": record.user_id}


def thread_json(record: ThreadRecord) -> dict[str, Any]:
    """One thread as ``show --json`` prints it (identifiers only: a record holds no secret)."""
    return {
        **_ids(record),
        "state": record.state.value,
        "createdAt": _when(record.created_at),
        "updatedAt": _when(record.updated_at),
        "cwd": record.cwd,
        "executionId": record.execution_id,
        "rosInvocationId": record.ros_invocation_id,
        "activeRunId": record.active_run_id,
        "activeRunKind": None if record.active_run_kind is None else record.active_run_kind.value,
        "lastError": record.last_error,
        "runtime": {"taskId": record.task_id, "contextId": record.context_id, "sessionId": record.session_id},
        "pendingInterrupts": [
            {
                "id": item.id,
                "reason": item.interrupt.get("reason"),
                "toolCallId": item.interrupt.get("toolCallId"),
                "expiresAt": _when(item.expires_at),
                "answerBeingSent": item.sending is not None,
            }
            for item in record.pending_interrupts
        ],
        "handedOff": record.run_phase is RunPhase.HANDED_OFF,
        "parkedUntil": _when(record.parked_until),
        "runs": len(record.runs) + record.earlier_runs,
    }


def runtime_keeps(record: ThreadRecord, config_dir: str) -> str:
    """What a delete leaves with the runtime, and where it is."""
    if record.session_id is None:
        return "nothing of this thread (it never reached the runtime)"
    return (f"session {record.session_id} (context {record.context_id}, last task {record.task_id or '-'}): "
            f"its transcript and checkpoints under projects/<workspace>/{record.session_id}/ in the runtime's "
            f"config folder ({config_dir} when it shares this --config-dir); erase them there")


def _cancel_json(done: Cancelled) -> dict[str, Any]:
    return {**_ids(done.record), "outcome": done.outcome, "state": done.record.state.value,
            "lastError": done.record.last_error,
            "runtimeTask": {"taskId": done.record.task_id, "state": done.task_state, "note": done.task_note}}


def _cancel_lines(done: Cancelled) -> list[str]:
    record = done.record
    head = (f"cancelled thread {record.thread_id}: now {record.state.value} ({record.last_error or '-'})"
            if done.outcome == "cancelled" else
            f"nothing to cancel: thread {record.thread_id} is {record.state.value}")
    task = done.task_state or f"unknown ({done.task_note})"
    return [head, f"runtime task {record.task_id or '-'}: {task}"]


def _show_lines(record: ThreadRecord) -> list[str]:
    view = thread_json(record)
    runtime = view.pop("runtime")
    pending = view.pop("pendingInterrupts")
    lines = [f"{name:17} {'-' if value is None else value}" for name, value in view.items()]
    lines += [f"{name:17} {'-' if value is None else value}" for name, value in runtime.items()]
    lines.append(f"{'pending':17} {len(pending)}")
    for item in pending:
        lines.append(f"  {item['id']}  {item['reason'] or '-'}  tool call {item['toolCallId'] or '-'}  "
                     f"expires {item['expiresAt']}{'  (answer being sent)' if item['answerBeingSent'] else ''}")
    return lines


def _print_list(listing: Listing, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"threads": [summary_json(item) for item in listing.threads], "more": listing.more},
                         ensure_ascii=False))
        return
    now = time.time()
    rows = [("THREAD", "STATE", "UPDATED", "AGE", "PENDING", "RUN", "KEY")]
    rows += [(item.thread_id, item.state.value, _when(item.updated_at) or "-", _age(item.updated_at, now),
              str(item.pending_interrupts), item.active_run_id or item.last_error or "-",
              item.key if item.key != item.thread_id else "-") for item in listing.threads]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if listing.more:
        print(f"(more threads match: raise --limit above {len(listing.threads)})", file=sys.stderr)


def _emit(document: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        print(json.dumps(document, ensure_ascii=False))
    else:
        print("\n".join(lines))


def _refused(exc: Refused, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": {"code": exc.code, "message": str(exc)}}, ensure_ascii=False))
    print(f"aguiadapter threads: {exc}", file=sys.stderr)
    return 1
