"""The runtime pool: one A2A client per runtime, where a new thread goes, and
how each runtime is doing.

Placement counts active runs per runtime in the store's run slots (the
``pool`` purpose, a runtime's name as the slot's "user"): in memory for the
file store, in Redis for every replica together. A new thread goes to the
reachable, non-draining runtime with the fewest active runs below its
capacity; ties rotate, so that an idle pool spreads new threads evenly. The
slot is taken in the same step that checks the capacity (one script with
Redis), so two replicas cannot both fill a runtime's last place.

Nothing here decides the fate of an answer: a runtime that does not answer
only refuses (retryably) what would need it; what became of a thread's task
is asked of its runtime once it answers again, by the usual evidence rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import attrs

from ..a2a.client import A2AClient, RuntimeStatus
from ..errors import AdapterError, ErrorCode
from ..logs import mask_url
from ..runtime.iac_code import IacCodeRuntime
from ..store.contract import StoreUnavailable
from ..store.slots import LocalRunSlots, RunSlot, RunSlots
from ..telemetry import QUIET, Telemetry
from .settings import DEFAULT_RUNTIME, RuntimeSpec, load_runtimes_file

log = logging.getLogger(__name__)

#: How often each runtime's ``/health`` is asked.
PROBE_SECONDS: Final = 5.0
#: ``Retry-After`` of a refusal for want of a runtime: about one probe later.
RETRY_AFTER_SECONDS: Final = 5


class RuntimeUnavailable(AdapterError):
    """``A2A_UNAVAILABLE`` before any stream: no runtime can take the run now
    (down, draining or full); nothing was written, trying again later is safe."""

    def __init__(self, reason: str) -> None:
        super().__init__(ErrorCode.A2A_UNAVAILABLE)
        #: Why, for logs (never shown to a client: it names runtimes).
        self.reason = reason

    def response_headers(self) -> dict[str, str]:
        """``Retry-After``: about when a probe may have seen a runtime come back."""
        return {"Retry-After": str(RETRY_AFTER_SECONDS)}


class RuntimeGone(Exception):
    """The thread's runtime is no longer in the pool (removed by its operator)."""


ClientFactory = Callable[[RuntimeSpec, str | None], A2AClient]


@attrs.define(eq=False)
class Member:
    """One runtime of the pool, as this process sees it."""

    spec: RuntimeSpec
    client: A2AClient
    runtime: IacCodeRuntime
    #: The last probe's answer (``unknown`` before the first one).
    status: RuntimeStatus | str = "unknown"
    #: Whether the pool closes the client (not one it was lent).
    owned: bool = True
    #: The pool probes its runtimes (set by :meth:`RuntimePool.start`).
    pool_probes: bool = False
    #: This process's runs on it (what an uncounted pool reports).
    active_here: int = 0

    @property
    def name(self) -> str:
        """What threads are pinned to."""
        return self.spec.name

    @property
    def reachable(self) -> bool:
        """Whether the last probe found something listening (a pool without probes
        assumes so). A runtime refusing this server's token counts: its runs fail
        with an error that says so, which a refusal for want of a runtime would not."""
        return self.status != "unreachable"

    @property
    def takes_new_threads(self) -> bool:
        """Reachable and not draining (with probes on, only once a probe saw it)."""
        return self.reachable and not self.spec.drain and not (self.pool_probes and self.status == "unknown")


class RuntimePool:
    """The runtimes a thread can be pinned to, by name."""

    def __init__(
        self,
        specs: Iterable[RuntimeSpec],
        *,
        token: str | None = None,
        slots: RunSlots | None = None,
        telemetry: Telemetry = QUIET,
        probe_seconds: float = PROBE_SECONDS,
        client_factory: ClientFactory | None = None,
        counted: bool = True,
    ) -> None:
        #: Whether runs are counted in the store's slots, and runtimes the probes found
        #: down refused. A fixed pool of one (``--a2a-url``) has nothing to choose or
        #: bound: it counts in memory only (no store call per run), and its runs try the
        #: runtime whatever its ``/health`` says, as before pools (an A2A server need not
        #: serve ``/health``; a run that cannot reach it fails with its own error).
        self.counted = counted
        self.token = token
        self.telemetry = telemetry
        self.slots: RunSlots = slots if slots is not None else LocalRunSlots()
        self.probe_seconds = probe_seconds
        self._make_client: ClientFactory = client_factory or self._client
        self.members: dict[str, Member] = {}
        #: Clients of runtimes removed or moved: runs still on them keep going.
        self._retired: list[Member] = []
        #: Rotates the order in which tied runtimes are tried.
        self._turn = 0
        #: Slots this process holds, renewed while their runs go on (Redis leases).
        self._held: set[RunSlot] = set()
        #: Ids of the slots of an uncounted pool.
        self._ids = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        #: Probes run (:meth:`start`): a runtime marked down is looked at again.
        self.probing = False
        for spec in specs:
            self.members[spec.name] = self._member(spec)

    @classmethod
    def single(cls, client: A2AClient, config_dir: Path | None = None) -> RuntimePool:
        """A pool of one lent client, named ``default`` (an embedded service, the tests); not probed."""
        pool = cls((), counted=False)
        spec = RuntimeSpec(DEFAULT_RUNTIME, client.url, config_dir=config_dir)
        pool.members[DEFAULT_RUNTIME] = Member(spec, client, IacCodeRuntime(client, config_dir), owned=False)
        return pool

    def _client(self, spec: RuntimeSpec, token: str | None) -> A2AClient:
        # A pool configured by name: its calls' spans name the runtime they went to.
        telemetry = self.telemetry.for_runtime(spec.name) if self.counted else self.telemetry
        return A2AClient(spec.url, token=token, telemetry=telemetry)

    def _member(self, spec: RuntimeSpec) -> Member:
        client = self._make_client(spec, spec.token or self.token)
        return Member(spec, client, IacCodeRuntime(client, spec.config_dir), pool_probes=self.probing)

    # ----------------------------------------------------------- lookups
    @property
    def names(self) -> list[str]:
        """The runtimes' names, in configuration order."""
        return list(self.members)

    @property
    def only(self) -> Member | None:
        """The one runtime of a pool of one (its embedded uses need no thread)."""
        return next(iter(self.members.values())) if len(self.members) == 1 else None

    def member(self, name: str | None) -> Member:
        """The runtime a thread is pinned to (``None``: made before pools, ``default``);
        :class:`RuntimeGone` when the pool no longer has it."""
        found = self.members.get(name or DEFAULT_RUNTIME)
        if found is None:
            raise RuntimeGone(name or DEFAULT_RUNTIME)
        return found

    # --------------------------------------------------------- placement
    async def place(self) -> tuple[str, RunSlot]:
        """Choose the runtime of a new thread and count its first run there:
        the fewest active runs below capacity among the reachable, non-draining
        runtimes; :class:`RuntimeUnavailable` when none can take it."""
        candidates = [member for member in self.members.values()
                      if member.takes_new_threads or (not self.counted and not member.spec.drain)]
        if not candidates:
            self.telemetry.count_refusal("no_runtime")
            raise RuntimeUnavailable("no runtime is reachable and not draining")
        if not self.counted:
            (member,) = candidates
            self.telemetry.placed(member.name)
            return member.name, self._here(member)
        counts = await self._counts([member.name for member in candidates])
        turn, self._turn = self._turn, self._turn + 1
        width = len(candidates)
        ranked = sorted(range(width), key=lambda index: (counts[index], (index - turn) % width))
        for index in ranked:
            member = candidates[index]
            if member.spec.capacity is not None and counts[index] >= member.spec.capacity:
                continue
            slot = await self._take(member)
            if slot is not None:
                log.debug("new thread placed on runtime %s (%d active)", member.name, counts[index])
                self.telemetry.placed(member.name)
                return member.name, slot
        self.telemetry.count_refusal("runtimes_full")
        raise RuntimeUnavailable("every runtime that takes new threads is full")

    async def enter(self, name: str | None) -> RunSlot:
        """Count a run of a thread pinned to ``name`` on it; refused
        (:class:`RuntimeUnavailable`) while that runtime is down or full, and
        :class:`RuntimeGone` when the pool no longer has it."""
        member = self.member(name)
        if not member.reachable and self.counted:
            # Asked again now: a runtime that came back serves its threads at
            # once, not a probe later (one health call, on the refusal path only).
            member.status = await member.client.health_status()
        if not member.reachable and self.counted:
            self.telemetry.count_refusal("unreachable")
            raise RuntimeUnavailable(f"runtime {member.name} is unreachable")
        slot = await self._take(member)
        if slot is None:
            self.telemetry.count_refusal("full")
            raise RuntimeUnavailable(f"runtime {member.name} is full")
        return slot

    async def adopt(self, name: str | None) -> RunSlot | None:
        """Count an adopted run (handed off by another process) on the runtime
        it already runs on: never refused, it is there whatever the capacity
        or the last probe says; ``None`` when it cannot be counted (the runtime
        left the pool, the store does not answer), which ends nothing."""
        member = self.members.get(name or DEFAULT_RUNTIME)
        if member is None:
            return None
        if not self.counted:
            return self._here(member)
        slot = RunSlot(uuid.uuid4().hex, member.name)
        try:
            if await self.slots.take(slot, None, None) != "taken":
                return None
        except StoreUnavailable as exc:
            log.warning("runtime %s: an adopted run not counted: %s", member.name, exc)
            return None
        self._held.add(slot)
        member.active_here += 1
        return slot

    async def leave(self, slot: RunSlot | None) -> None:
        """A run ended: stop counting it (never raises)."""
        if slot is None or slot not in self._held:
            return
        self._held.discard(slot)
        member = self.members.get(slot.user)
        if member is not None:
            member.active_here -= 1
        if self.counted:
            await self.slots.release(slot)

    def _here(self, member: Member) -> RunSlot:
        """A run counted in this process only (an uncounted pool)."""
        slot = RunSlot(str(next(self._ids)), member.name)
        self._held.add(slot)
        member.active_here += 1
        return slot

    async def report(self, *, with_urls: bool) -> list[dict[str, Any]]:
        """What ``/health`` lists of each runtime (the URLs, masked, only ``with_urls``)."""
        counts = await self.active_runs()
        listed: list[dict[str, Any]] = []
        for member in self.members.values():
            active = counts[member.name]
            if active is not None:
                self.telemetry.runtime_load(member.name, float(active))
            entry: dict[str, Any] = {"name": member.name}
            if with_urls:
                entry["url"] = mask_url(member.spec.url)
            entry |= {
                "reachable": member.status == "ok", "status": member.status, "draining": member.spec.drain,
                # With ``draining``: 0 tells the operator the runtime may be stopped.
                "activeRuns": active, "capacity": member.spec.capacity,
            }
            listed.append(entry)
        return listed

    @property
    def takes_new_threads(self) -> bool:
        """Whether some runtime can take a new thread (reachable, not draining; capacity aside)."""
        return any(member.takes_new_threads for member in self.members.values())

    async def active_runs(self) -> dict[str, int | None]:
        """Active runs per runtime, every replica's (``None`` each when the store does not answer);
        an uncounted pool's, this process's."""
        if not self.counted:
            return {name: member.active_here for name, member in self.members.items()}
        try:
            counts = await self.slots.held(self.names)
        except StoreUnavailable:
            return {name: None for name in self.names}
        return dict(zip(self.names, counts, strict=True))

    async def _counts(self, names: list[str]) -> list[int]:
        try:
            return await self.slots.held(names)
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc

    async def _take(self, member: Member) -> RunSlot | None:
        if not self.counted:
            return self._here(member)
        slot = RunSlot(uuid.uuid4().hex, member.name)
        try:
            taken = await self.slots.take(slot, None, member.spec.capacity)
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc
        if taken != "taken":
            return None
        self._held.add(slot)
        member.active_here += 1
        return slot

    # ------------------------------------------------------------ health
    async def start(self) -> None:
        """Probe every runtime once (a down one is logged, not fatal), then in the background."""
        await self.probe()
        self.probing = True
        for member in self.members.values():
            member.pool_probes = True
        for member in self.members.values():
            if member.status == "unauthorized":
                log.error("the A2A runtime %s at %s refuses this server's token (HTTP 401/403): give it the "
                          "runtime's token (--a2a-token, IAC_CODE_AGUI_A2A_TOKEN, or the pool file's token_env; "
                          "iac-code a2a reads IACCODE_A2A_HTTP_TOKEN); runs fail until they match",
                          member.name, mask_url(member.spec.url))
            elif member.status != "ok":
                log.warning("the A2A runtime %s does not answer at %s; runs fail (and no new thread goes to it) "
                            "until it does", member.name, mask_url(member.spec.url))
        self._tasks.append(asyncio.create_task(self._probe_forever()))
        lease = self.slots.lease_seconds
        if lease is not None and self.counted:
            self._tasks.append(asyncio.create_task(self._renew_forever(max(0.1, lease / 3))))

    async def probe(self) -> None:
        """Ask every runtime's ``/health`` at once; a change is logged."""
        members = list(self.members.values())
        answers = await asyncio.gather(*(member.client.health_status() for member in members))
        for member, status in zip(members, answers, strict=True):
            if member.status not in ("unknown", status):
                log.warning("runtime %s: %s -> %s", member.name, member.status, status)
            member.status = status
            self.telemetry.runtime_health(member.name, status == "ok")

    def saw_unreachable(self, name: str | None) -> None:
        """A call to the runtime found nothing listening: down until a probe says otherwise."""
        member = self.members.get(name or DEFAULT_RUNTIME)
        if self.probing and member is not None and member.status != "unreachable":
            log.warning("runtime %s: unreachable (a call failed to connect)", member.name)
            member.status = "unreachable"
            self.telemetry.runtime_health(member.name, False)

    async def _probe_forever(self) -> None:
        while True:
            await asyncio.sleep(self.probe_seconds)
            try:
                await self.probe()
            except Exception:  # a probe must never end the loop
                log.exception("runtime probe failed")

    async def _renew_forever(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.slots.renew(list(self._held))  # a RunSlot is frozen: safe to share
            except StoreUnavailable as exc:
                log.warning("runtime run counts not renewed: %s", exc)

    # ------------------------------------------------------------ changes
    def reload(self, specs: Iterable[RuntimeSpec]) -> list[str]:
        """Take a new configuration (SIGHUP): new runtimes join, a changed one
        gets a new client (runs on the old one finish on it), a missing one
        leaves (its threads are pinned again or lost on their next request).
        The changes, in words, for the log."""
        wanted = {spec.name: spec for spec in specs}
        changes: list[str] = []
        for name in list(self.members):
            if name not in wanted:
                self._retired.append(self.members.pop(name))
                changes.append(f"{name} removed")
        for name, spec in wanted.items():
            old = self.members.get(name)
            if old is not None and old.spec == spec:
                continue
            if old is not None and old.spec.url == spec.url and old.spec.token == spec.token:
                old.spec = spec  # capacity, drain: the same client goes on
                changes.append(f"{name} changed (drain={spec.drain}, capacity={spec.capacity})")
                continue
            if old is not None:
                self._retired.append(old)
            member = self._member(spec)
            self.members[name] = member
            changes.append(f"{name} {'moved' if old is not None else 'added'} at {mask_url(spec.url)}")
        # Keep configuration order.
        self.members = {name: self.members[name] for name in wanted}
        return changes

    async def reread(self, path: Path) -> bool:
        """SIGHUP: take the runtimes file again. A bad file keeps the pool as
        it is and says why in one line; whether the file was taken."""
        try:
            specs = load_runtimes_file(path)
        except ValueError as exc:
            log.error("runtimes file not taken, the pool stays as it was: %s", exc)
            return False
        changes = self.reload(specs)
        log.warning("runtimes file %s read again: %s", path, "; ".join(changes) or "no change")
        if changes and self.probing:
            await self.probe()  # a new or moved runtime is placed on only once it answers
        return True

    async def close(self) -> None:
        """Stop probing and renewing; close the clients this pool made."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for member in [*self.members.values(), *self._retired]:
            if member.owned:
                await member.client.close()
