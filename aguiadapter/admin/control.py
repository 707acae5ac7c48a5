"""The channel into a server that holds a file store: cancel and delete while it runs.

The file store belongs to one process: its claims (who streams which thread)
live in that process's memory, so the operator command cannot take them from
outside. A server on the file store therefore listens on a unix socket in its
state folder, ``<state-dir>/admin.sock``, and the command asks it to cancel or
delete a thread there; the server does it with its own store, claims and
service, exactly as the command would on Redis (and as the cancel route does:
a run it streams ends with its terminal event, pending interrupts end with
the cancel's outcome, never silently).

Who may use it:

- the socket is made ``0600`` (owner only) in the state folder, which the
  server's user owns;
- every connection's peer is checked with ``SO_PEERCRED`` (Linux): only the
  server's own OS user, or root, is served; anyone else is answered 403 and
  the attempt is logged. The socket file is replaced at each start (the
  folder's lock says no other server uses it) and removed at exit.

Only ``cancel`` and ``delete`` are served; list and show read the records
directly. The socket speaks HTTP (aiohttp on both ends) with JSON bodies:
``POST /threads/cancel`` or ``/threads/delete`` with ``{"thread", "user",
"wait"}``, answered ``{"record": ..., ...}`` or ``{"error": {"code",
"message"}}``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
from aiohttp import web

from ..config import Config
from ..threads.record import ThreadRecord, record_from_json, record_to_json
from ..web.keys import CLIENT, SERVICE
from .operations import Cancelled, Refused, ThreadAdmin

__all__ = ["CONTROL_SOCKET", "ask_server", "control_listener", "control_path"]

log = logging.getLogger(__name__)

#: The socket's name in the state folder.
CONTROL_SOCKET = "admin.sock"
#: How long the command waits for the server's answer beyond a delete's own wait.
ANSWER_SECONDS = 30.0
#: The longest socket path ``bind``/``connect`` take (108 bytes with the final NUL on Linux).
_SUN_PATH_MAX = 107

ADMIN = web.AppKey("aguiadapter.control_admin", ThreadAdmin)


def control_path(config: Config) -> Path:
    """Where the server's control socket is."""
    return config.state_dir / CONTROL_SOCKET


@contextlib.contextmanager
def _addressable(path: Path) -> Iterator[str]:
    """A name ``bind``/``connect`` take for ``path``: itself, or, when too long
    for a socket address, the same file reached through an open descriptor of
    its folder (``/proc/self/fd/N/admin.sock``, Linux)."""
    if len(os.fsencode(path)) <= _SUN_PATH_MAX or not sys.platform.startswith("linux"):
        yield str(path)
        return
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


def _peer_uid(request: web.Request) -> int | None:
    """The connecting process's user id (``None`` where the OS does not say)."""
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return int(uid)


def _error(code: str, message: str, status: int) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


async def _serve(request: web.Request) -> web.Response:
    uid = _peer_uid(request)
    if uid is not None and uid not in (os.getuid(), 0):
        log.warning("refused an admin request on the control socket from OS user %s", uid)
        return _error("forbidden", "only the server's own OS user may use its control socket", 403)
    action = request.match_info["action"]
    try:
        asked = await request.json()
        thread, user, wait = str(asked["thread"]), asked.get("user"), float(asked.get("wait") or 0.0)
    except (ValueError, KeyError, TypeError):
        return _error("usage", "expected {\"thread\": ..., \"user\": ..., \"wait\": ...}", 400)
    admin = request.app[ADMIN]
    try:
        record = await admin.find(thread, None if user is None else str(user))
        if action == "cancel":
            done = await admin.cancel(record)
            log.info("admin: cancel of thread %s through the control socket: %s", record.key, done.outcome)
            return web.json_response({"record": record_to_json(done.record).decode(), "outcome": done.outcome,
                                      "taskState": done.task_state, "taskNote": done.task_note})
        deleted = await admin.delete(record, wait)
        log.info("admin: deleted thread %s through the control socket", record.key)
        return web.json_response({"record": record_to_json(deleted).decode()})
    except Refused as exc:
        return _error(exc.code, str(exc), 409)


def control_listener(config: Config) -> Callable[[web.Application], contextlib.AbstractAsyncContextManager[None]]:
    """The app's cleanup context serving the control socket (file store only;
    a shared store needs none: the command works through its claims)."""

    @contextlib.asynccontextmanager
    async def context(app: web.Application) -> AsyncIterator[None]:
        service, client = app.get(SERVICE), app.get(CLIENT)
        if config.store_url is not None or service is None or client is None:
            yield
            return
        control = web.Application()
        control[ADMIN] = ThreadAdmin(config, service.store, client, service=service)
        control.router.add_post("/threads/{action:cancel|delete}", _serve)
        runner = web.AppRunner(control, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        path = control_path(config)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _addressable(path) as name:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)  # a crashed server's: the folder's lock is ours now
                sock.bind(name)
                os.chmod(name, 0o600)
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        try:
            yield
        finally:
            await runner.cleanup()
            with contextlib.suppress(OSError), _addressable(path) as name:
                os.unlink(name)

    return context


async def ask_server(config: Config, action: str, thread: str, user: str | None,
                     wait: float = 0.0) -> Cancelled | ThreadRecord:
    """Ask the server holding ``config``'s state folder to ``cancel`` (a
    :class:`Cancelled`) or ``delete`` (the deleted record) a thread;
    :class:`Refused` when it refuses, or when no server answers there."""
    path = control_path(config)
    timeout = aiohttp.ClientTimeout(total=ANSWER_SECONDS + wait)
    with _addressable(path) as name:
        try:
            async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=name), timeout=timeout) as session:
                async with session.post(f"http://aguiadapter/threads/{action}",
                                        json={"thread": thread, "user": user, "wait": wait}) as response:
                    answer = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise Refused(
                f"cannot {action} now: a running aguiadapter holds the state folder {config.state_dir}, and its "
                f"control socket ({path}) does not answer ({exc.__class__.__name__}: {exc}). Stop it and run the "
                "command again, or use a shared store (--store redis://...)", "unavailable"
            ) from exc
    if "error" in answer:
        raise Refused(str(answer["error"]["message"]), str(answer["error"]["code"]))
    record = record_from_json(str(answer["record"]).encode())
    if action == "cancel":
        return Cancelled(record, str(answer["outcome"]), answer.get("taskState"), answer.get("taskNote"))
    return record
