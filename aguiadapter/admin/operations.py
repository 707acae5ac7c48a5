"""What the operator command does to threads, through the store and its claims.

The command is one more participant of the store, never a way around it:

- a cancel is the cancel route's own path (:meth:`ThreadService.cancel_execution`):
  a run another process streams is asked to stop over the replicas' cancel
  signal and ends there with its terminal event; a thread nobody holds is
  claimed, a run that died with its process is settled first, the runtime's
  task is cancelled and the thread settles ``terminal``;
- a delete claims the thread first: a live run holds the claim, so a thread
  that streams is refused (or waited for), and one that waits for answers
  or holds a dead run must be cancelled first;
- the file store belongs to one process: while a server holds its folder
  the command reads (list, show) itself and asks that server, over its
  control socket (see :mod:`.control`), to cancel or delete.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from typing import Any

import attrs

from ..a2a.client import A2AClient, A2AError, A2AUnavailable
from ..config import Config
from ..errors import AdapterError, ErrorCode
from ..pool.pool import RuntimePool
from ..store.file.store import StateDirInUse
from ..threads.listing import MAX_LIMIT, ListCursor, ThreadSummary, list_owner
from ..threads.record import ThreadRecord, ThreadState, thread_key
from ..store.run_log import LogBounds
from ..service.thread_service import ThreadService
from ..store.factory import open_store
from ..store.contract import CorruptRecord, PersistenceError, StoreUnavailable, ThreadStore

log = logging.getLogger(__name__)

#: How often a delete that waits looks whether the live run let go of the thread.
CLAIM_POLL_SECONDS = 0.2
#: A2A task states after which a task does nothing more.
_TASK_ENDED = frozenset({
    "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
})
#: Beyond every key: a cursor that starts a list at a time, whatever the key.
_AFTER_EVERY_KEY = "\U0010ffff"


class Refused(Exception):
    """The thread is not found, or the operation is refused (exit status 1)."""

    def __init__(self, message: str, code: str = "refused") -> None:
        super().__init__(message)
        self.code = code


@attrs.frozen
class Listing:
    """The threads a list found (newest first) and whether more matched than shown."""

    threads: list[ThreadSummary]
    more: bool


@attrs.frozen
class Cancelled:
    """What a cancel did: the thread as it is now, and the runtime's task."""

    record: ThreadRecord
    #: ``cancelled``, or ``nothing`` when no run and no interrupt was there to cancel.
    outcome: str
    #: The task's state as the runtime reports it after the cancel (``None``: not asked).
    task_state: str | None
    #: Why the task's state is unknown, when it is.
    task_note: str | None = None


class NoRuntime(A2AClient):
    """The client when no ``--a2a-url`` is given: every call fails as an
    unreachable runtime would (a run that died is then not settled, and the
    runtime's task is not cancelled; the command says so)."""

    def __init__(self) -> None:
        super().__init__("http://runtime.invalid/")

    async def _refuse(self) -> dict[str, Any]:
        raise A2AUnavailable("no runtime given (--a2a-url)", sent=False)

    async def get_task(self, task_id: str, history_length: int | None = None) -> dict[str, Any]:
        return await self._refuse()

    async def cancel_task(self, task_id: str) -> dict[str, Any]:
        return await self._refuse()

    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._refuse()

    async def get_json(self, path: str, params: dict[str, str], *, max_bytes: int | None = None) -> dict[str, Any]:
        return await self._refuse()


class ThreadAdmin:
    """The threads of one store, as the server with ``config`` keeps them."""

    def __init__(
        self, config: Config, store: ThreadStore, client: A2AClient | RuntimePool, *,
        log_bounds: LogBounds | None = None, service: ThreadService | None = None,
    ) -> None:
        self.config = config
        self.store = store
        #: The runtimes, by the names threads are pinned to (``--a2a-url``: one, ``default``).
        self.pool = client if isinstance(client, RuntimePool) else None
        self.client = client if isinstance(client, A2AClient) else next(iter(client.members.values())).client
        self.has_runtime = not isinstance(client, NoRuntime)
        #: The file store's folder is held by a running server: look, do not touch.
        self.read_only = False
        # Inside a server (its control socket, see control.py) the server's own service.
        self.service = service or ThreadService(
            store, client, interrupt_ttl_seconds=config.interrupt_ttl_seconds, log_bounds=log_bounds,
            runtime_config_dir=config.runtime_config_dir,
        )

    @classmethod
    def for_config(cls, config: Config) -> ThreadAdmin:
        """The store the server with ``config`` uses (the file store without
        its retention sweep: the command only does what it is asked)."""
        from ..web.app import run_log_bounds

        retention = config.state_retention_days if config.store_url else 0
        store = open_store(config.store_url, state_dir=config.state_dir, retention_days=retention,
                           durability=config.durability)
        client: A2AClient | RuntimePool = (
            RuntimePool(config.runtimes, token=config.a2a_token, counted=False) if config.runtimes
            else A2AClient(config.a2a_url, token=config.a2a_token) if config.a2a_url else NoRuntime()
        )
        return cls(config, store, client, log_bounds=run_log_bounds(config))

    async def open(self) -> None:
        """Open the store (``RuntimeError`` with a readable message when it cannot be)."""
        if self.store.kind == "file" and not self.config.state_dir.is_dir():
            # A mistyped folder is said so, not made (and found empty).
            raise Refused(f"no state folder at {self.config.state_dir} (--state-dir, IAC_CODE_AGUI_STATE_DIR, "
                          "--config-dir): is the server's setting given?", "not_found")
        try:
            await self.store.start()
        except StateDirInUse:
            self.read_only = True  # records are replaced atomically: reading them is safe

    async def close(self) -> None:
        """Close the store and the runtime client."""
        await self.service.shutdown()
        if self.pool is not None:
            await self.pool.close()
        else:
            await self.client.close()

    # ------------------------------------------------------------ finding
    async def find(self, thread: str, principal: str | None) -> ThreadRecord:
        """The thread ``thread`` of ``principal`` (the user as the identity
        provider names them); without one, ``thread`` is a store key: a
        thread id of a server without verified identity, or a ``u/...`` key
        as ``list`` shows it. ``Refused`` (``not_found``) when there is none."""
        keys = [thread] if principal is None else [thread_key(thread, principal), thread]
        for key in keys:
            try:
                record = await self.store.load(key)
            except CorruptRecord as exc:
                raise Refused(f"thread {thread!r}: its record cannot be read: {exc}") from exc
            except StoreUnavailable as exc:
                raise Refused(f"the store does not answer: {exc}", "unavailable") from exc
            if record is not None and (principal is None or record.principal == principal):
                return record
        who = f" of user {principal!r}" if principal is not None else ""
        raise Refused(f"no thread {thread!r}{who}", "not_found")

    async def list_threads(
        self,
        *,
        principal: str | None = None,
        user_id: str | None = None,
        states: Collection[ThreadState] | None = None,
        older_than: float | None = None,
        limit: int = 50,
    ) -> Listing:
        """Threads newest first: one user's (from their list), or every
        user's (a scan of every record) when no user is named; only those
        in ``states`` and last changed ``older_than`` seconds ago or before."""
        cutoff = None if older_than is None else time.time() - older_than
        wanted = None if not states else frozenset(states)
        try:
            if principal is None and user_id is None:
                return await self._scan(wanted, cutoff, limit)
            owner = list_owner(principal, user_id)
            after = None if cutoff is None else ListCursor(cutoff, _AFTER_EVERY_KEY)
            found: list[ThreadSummary] = []
            while True:
                page = await self.store.list_threads(owner, after, min(MAX_LIMIT, limit + 1 - len(found)), wanted)
                found.extend(page.threads)
                if len(found) > limit or page.next_cursor is None:
                    return Listing(found[:limit], len(found) > limit)
                after = page.next_cursor
        except StoreUnavailable as exc:
            raise Refused(f"the store does not answer: {exc}", "unavailable") from exc

    async def _scan(self, states: frozenset[ThreadState] | None, cutoff: float | None, limit: int) -> Listing:
        found = [
            summary async for summary in self.store.each_summary()
            if (states is None or summary.state in states) and (cutoff is None or summary.updated_at <= cutoff)
        ]
        found.sort(key=lambda summary: summary.position, reverse=True)
        return Listing(found[:limit], len(found) > limit)

    # ------------------------------------------------------------ changing
    def _writable(self, what: str) -> None:
        if self.read_only:
            raise Refused(
                f"cannot {what} now: a running aguiadapter holds the state folder {self.config.state_dir} "
                "(the file store belongs to one process). Stop it and run the command again, "
                "or use a shared store (--store redis://...) to change threads while the server runs"
            )

    async def cancel(self, record: ThreadRecord) -> Cancelled:
        """Cancel the thread's run or pending interrupts, as the cancel route
        does (whichever replica streams the run), then the runtime's task."""
        self._writable("cancel a thread")
        if (record.state not in (ThreadState.RUNNING, ThreadState.INTERRUPTED) or record.execution_id is None
                or record.ros_invocation_id is None):
            return Cancelled(record, "nothing", None, "no run and no interrupt to cancel")
        try:
            status = await self.service.cancel_execution(
                record.execution_id, record.thread_id, record.ros_invocation_id, record.principal
            )
            current = await self.store.load(record.key)
        except AdapterError as exc:
            raise Refused(_cancel_refusal(exc, record, self.has_runtime),
                          "unavailable" if exc.code is ErrorCode.STATE_STORE_UNAVAILABLE else "refused") from exc
        except (StoreUnavailable, CorruptRecord) as exc:
            raise Refused(f"the store does not answer: {exc}", "unavailable") from exc
        if current is None:
            raise Refused(f"thread {record.thread_id!r} was deleted meanwhile", "not_found")
        if current.execution_id == record.execution_id and current.state in (ThreadState.RUNNING,
                                                                              ThreadState.INTERRUPTED):
            raise Refused(f"thread {record.thread_id!r} is still {current.state.value} ({status}): "
                          "something else held it for a moment; run the cancel again")
        task_state, note = await self._end_task(record)
        return Cancelled(current, "cancelled" if status == "cancelled" else "nothing", task_state, note)

    async def _end_task(self, record: ThreadRecord) -> tuple[str | None, str | None]:
        """The runtime's task after the cancel: cancelled once more if the
        runtime still runs it (a stuck run's task), and its state as told."""
        task_id = record.task_id
        if task_id is None:
            return None, "the thread has no runtime task"
        if not self.has_runtime:
            return None, ("not asked (no --a2a-url): a server that streamed the run cancelled its task; a waiting "
                          "thread's task stays in the runtime until cancelled there")
        try:
            runtime = self.service.runtime_of(record)
        except AdapterError:
            return None, f"not asked: its runtime {record.runtime} is no longer in the pool"
        try:
            state = await self._task_state(runtime.client, task_id)
            if state not in _TASK_ENDED:
                await runtime.cancel_task(task_id)
                state = await self._task_state(runtime.client, task_id)
        except A2AError as exc:
            return None, f"the runtime did not say: {exc}"
        return state, None

    async def _task_state(self, client: A2AClient, task_id: str) -> str:
        task = await client.get_task(task_id, history_length=0)
        status = task.get("status")
        return str(status.get("state")) if isinstance(status, dict) else "unknown"

    async def delete(self, record: ThreadRecord, wait_seconds: float = 0.0) -> ThreadRecord:
        """Erase an idle or terminal thread: record, run logs, list entry and
        deadline, under its claim. A thread a live run holds is refused
        (after waiting up to ``wait_seconds`` for the claim); one that runs
        or waits for answers must be cancelled first."""
        self._writable("delete a thread")
        deadline = time.monotonic() + wait_seconds
        try:
            while (claim := await self.store.claim(record.key, "admin-delete")) is None:
                if time.monotonic() >= deadline:
                    raise Refused(
                        f"thread {record.thread_id!r} has a live run (run {record.active_run_id or '?'}, held "
                        "by a server now): cancel it first (threads cancel), or wait for it with --wait SECONDS"
                    )
                await asyncio.sleep(CLAIM_POLL_SECONDS)
            try:
                current = await self.store.load(record.key)
                if current is None:
                    raise Refused(f"thread {record.thread_id!r} was deleted meanwhile", "not_found")
                if current.state in (ThreadState.RUNNING, ThreadState.INTERRUPTED):
                    what = ("waits for the answers to its pending interrupts" if current.pending_interrupts
                            and current.state is ThreadState.INTERRUPTED else "holds a run")
                    raise Refused(f"thread {record.thread_id!r} {what} ({current.state.value}): "
                                  "cancel it first (threads cancel), then delete it")
                if not await self.store.delete_thread(current, claim):
                    raise Refused(f"thread {record.thread_id!r}: its claim lapsed meanwhile; run the delete again")
                return current
            finally:
                await self.store.release(claim)
        except (StoreUnavailable, CorruptRecord) as exc:
            raise Refused(f"the store does not answer: {exc}", "unavailable") from exc
        except PersistenceError as exc:
            raise Refused(f"thread {record.thread_id!r} not deleted: {exc}", "unavailable") from exc


def _cancel_refusal(exc: AdapterError, record: ThreadRecord, has_runtime: bool) -> str:
    """The operator's words for a cancel the service refused."""
    name = repr(record.thread_id)
    if exc.code is ErrorCode.THREAD_BUSY:
        return (f"thread {name}: the server that streams its run did not end it within 5 s; "
                "look at that server's log, and run the cancel again")
    if exc.code is ErrorCode.A2A_UNAVAILABLE:
        hint = "" if has_runtime else " (give --a2a-url)"
        return (f"thread {name}: its run died with its process, and settling it needs the runtime{hint}: "
                "the runtime must say whether an answer was taken before the thread can be cancelled")
    if exc.code is ErrorCode.STATE_STORE_UNAVAILABLE:
        return "the store does not answer"
    return f"thread {name} not cancelled: {exc.code.name}"
