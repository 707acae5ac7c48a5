"""A recorded ``iac-code a2a`` runtime, served for real on loopback.

``tests/fixtures/a2a-pipeline/`` holds complete HTTP exchanges between a
reference AG-UI adapter and the real runtime running a ``selling`` pipeline
(its README describes them). A :class:`ReplayRuntime` plays the runtime's side
of one recording to *our* adapter: A2A JSON-RPC on ``POST /`` and iac-code's
two REST routes, on a real socket. Our adapter does not ask what the
reference asked, nor in the same order, so a reply is chosen by the moment
the runtime is at, never by the position of a request:

* **Moves** change the runtime: the user message, every answer (its
  ``SendStreamingMessage`` or ``SendMessage``) and every ``SubscribeToTask``
  (the only way a recording shows what the task did next). A move is served
  when it matches the recording's next one: the user message by its text; an
  answer by the input it names (a permission's ``inputId``, a question's or a
  selection's option label), sub-pipeline answers sent one after the other in
  any order among themselves. Its reply is the recorded one. The **moment** is
  the last move served.
* **Reads** do not change it. ``GetTask`` gets the last ``GetTask`` reply
  recorded at this moment. The pipeline state route gets the snapshot of the
  last state reply recorded up to this moment, and the events of the
  runtime's log (every event any recorded state reply carried, by sequence)
  after the requested ``afterSequence``, up to the moment's horizon (the
  highest sequence the recording shows by then). The session restore gets
  the recorded ``{"status": "current"}``.
* A sub-pipeline answer the recording sent with ``SendMessage`` and the
  adapter streams gets the recorded acknowledgement as the one result of a
  stream, which the runtime then closes (the runtime's own behaviour, see
  the fixtures' README); a streamed answer sent with ``SendMessage`` is
  refused, the recording cannot show what that call would return.
* A stream the reference stopped reading before the runtime ended it (a
  sub-pipeline permission arrives while the task keeps ``WORKING``) stays open
  after its last recorded event until the client leaves, as the runtime's
  did.
* Ids the adapter chooses itself replace the recorded ones in every reply:
  the contextId (iac-code also uses it as the ``pipelineRunId``), the message
  ids the runtime echoes, the ``rosInvocationId`` and the workspace path (the
  recording's ``/workspace/pipeline``).

Refused, and listed in :attr:`ReplayRuntime.refusals` with the reason (a
JSON-RPC error on ``POST /``, HTTP 409 on the REST routes): what the real
runtime would refuse (another task or context, a permission answer whose ids
are not the ones it asked with, an answer to an input it no longer waits
for, such as a second answer to the same input or a text message while it
waits for a permission) and what the recording cannot show (a second user
turn, another decision than the recorded one, a move the recording does not
make next, a read at a moment the recording never reached, events the
recording never saw).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from .pipeline_recording import RESTORE_PATH, STATE_PATH, Exchange, RecordedAnswer, Recording
from .serve import on_loopback

#: The workspace path the recordings show in place of the real one.
RECORDED_CWD: Final = "/workspace/pipeline"
#: JSON-RPC error code of a refusal (implementation-defined server error range).
REFUSED: Final = -32099
TASK_NOT_FOUND: Final = -32001


@dataclass
class Seen:
    """One request the replay received, and what it did with it."""

    kind: str
    body: Any
    #: The recorded exchange whose reply was served.
    served: Exchange | None = None
    refusal: str | None = None

    def __str__(self) -> str:
        if self.refusal is not None:
            return f"{self.kind}: refused: {self.refusal}"
        return f"{self.kind}: served {self.served}"


@dataclass
class SentAnswer:
    """One answer the adapter sent, as it sent it."""

    method: str
    message: dict[str, Any]


class Refusal(Exception):
    """A request the recorded runtime would refuse, or the recording cannot answer."""

    def __init__(self, reason: str, code: int = REFUSED) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


@dataclass
class LearnedIds:
    """The adapter's own ids, by the recorded ones they replace."""

    ids: dict[str, str] = field(default_factory=dict)

    def ours(self, value: Any) -> Any:
        """``value`` (recorded JSON) with every recorded id replaced by the adapter's."""
        if isinstance(value, str):
            for recorded, own in self.ids.items():
                if recorded in value:
                    value = value.replace(recorded, own)
            return value
        if isinstance(value, dict):
            return {key: self.ours(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.ours(item) for item in value]
        return value


class ReplayRuntime:
    """Serves one recording's runtime side on a free loopback port."""

    def __init__(self, recorded: Recording) -> None:
        self.recording = recorded
        #: Every request, in arrival order.
        self.seen: list[Seen] = []
        #: Why each refused request was refused.
        self.refusals: list[str] = []
        #: The answers the adapter sent, by the recorded input they answer.
        self.answers: dict[str, list[SentAnswer]] = {}
        #: The recorded moves served, in order.
        self.served: list[Exchange] = []
        #: The user message the adapter sent for the recorded one.
        self.user_message: dict[str, Any] | None = None
        self.learned = LearnedIds()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/", self._rpc)
        app.router.add_post(RESTORE_PATH, self._restore)
        app.router.add_get(STATE_PATH, self._state)
        app.router.add_get("/health", self._health)
        # A client that leaves ends its handler: held streams close with it.
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await on_loopback(runner)
        self._runner = runner
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
        return self.url

    async def close(self) -> None:
        self._closing.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def describe(self) -> str:
        """Every request so far and what became of it (for failure messages)."""
        return "\n".join(f"  {index}. {seen}" for index, seen in enumerate(self.seen, 1))

    @property
    def context_id(self) -> str | None:
        """The contextId the adapter chose for the thread."""
        return self.learned.ids.get(self.recording.context_id)

    # ------------------------------------------------------------- moments
    def moment(self) -> int:
        """The seq of the last move served: the runtime is right after it.
        (Sub-pipeline answers may come in any order among themselves; a read
        in between sees a moment only once the served moves are a prefix.)"""
        served = [move.seq for move in self.served]
        if served != [move.seq for move in self.recording.moves[: len(served)]]:
            raise Refusal("the moves were served in an order the recording never shows: "
                          f"{served}; the recording's are {[m.seq for m in self.recording.moves]}")
        return served[-1] if served else 0

    def _next_moves(self) -> list[Exchange]:
        """The moves the runtime takes next: one, or a run of sub-pipeline
        answers sent with SendMessage (any order among them)."""
        rest = [move for move in self.recording.moves if move not in self.served]
        if not rest:
            return []
        if rest[0].kind != "SendMessage":
            return rest[:1]
        group = []
        for move in rest:
            if move.kind != "SendMessage":
                break
            group.append(move)
        return group

    # -------------------------------------------------------------- routes
    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _rpc(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        method = body.get("method") if isinstance(body, dict) else None
        params = body.get("params") if isinstance(body, dict) else None
        rpc_id = body.get("id") if isinstance(body, dict) else None
        seen = Seen(str(method), body)
        self.seen.append(seen)
        try:
            if not isinstance(params, dict):
                raise Refusal("no params object")
            if method in ("SendStreamingMessage", "SendMessage"):
                return await self._message(request, seen, rpc_id, method, params)
            if method == "GetTask":
                self._check_task(params.get("id"))
                reads = [x for x in self.recording.recorded_at(self.moment()) if x.kind == "GetTask"]
                if not reads:
                    raise Refusal(f"the recording has no GetTask after move #{self.moment()}")
                seen.served = reads[-1]
                return web.json_response({**self.learned.ours(reads[-1].events[0]), "id": rpc_id})
            if method == "SubscribeToTask":
                self._check_task(params.get("id"))
                moves = self._next_moves()
                if not moves or moves[0].kind != "SubscribeToTask":
                    raise Refusal(f"the recording does not follow the task now (next: {[str(m) for m in moves]})")
                self.served.append(moves[0])
                seen.served = moves[0]
                return await self._stream(request, rpc_id, moves[0].events, natural_end=moves[0].natural_end)
            raise Refusal(f"the recording has no {method}")
        except Refusal as refusal:
            seen.refusal = refusal.reason
            self.refusals.append(f"{method}: {refusal.reason}")
            return web.json_response({
                "jsonrpc": "2.0", "id": rpc_id,
                "error": {"code": refusal.code, "message": f"replay: {refusal.reason}"},
            })

    async def _restore(self, request: web.Request) -> web.Response:
        body = await request.json()
        seen = Seen("restore", body)
        self.seen.append(seen)
        expected = {"cwd": self.learned.ours(RECORDED_CWD), "sessionId": self.recording.session_id,
                    "taskId": self.recording.task_id}
        wrong = {key: body.get(key) for key in expected if key in body and body.get(key) != expected[key]}
        if "sessionId" not in body or "cwd" not in body or wrong:
            return self._refuse_rest(seen, f"restore of another session: {body} (the runtime has {expected})")
        seen.served = next(x for x in self.recording.exchanges if x.kind == "restore")
        return web.json_response(self.recording.restore_reply)

    async def _state(self, request: web.Request) -> web.Response:
        seen = Seen("state", dict(request.query))
        self.seen.append(seen)
        try:
            self._check_task(request.query.get("taskId"))
            after = int(request.query.get("afterSequence", "0"))
            moment = self.moment()
            documents = [x for x in self.recording.until(moment) if x.kind == "state"]
            if not documents:
                raise Refusal(f"the recording has no pipeline state by move #{moment}")
            horizon = self.recording.horizon(moment)
            missing = [s for s in range(after + 1, horizon + 1) if s not in self.recording.log]
            if missing:
                raise Refusal(f"the recording's state route never returned events {missing[0]}..{missing[-1]} "
                              f"(asked after {after} at move #{moment})")
        except (Refusal, ValueError) as exc:
            return self._refuse_rest(seen, exc.reason if isinstance(exc, Refusal) else str(exc))
        seen.served = documents[-1]
        events = [self.recording.log[s] for s in range(after + 1, horizon + 1)]
        return web.json_response(self.learned.ours({**documents[-1].events[0], "events": events}))

    def _refuse_rest(self, seen: Seen, reason: str) -> web.Response:
        seen.refusal = reason
        self.refusals.append(f"{seen.kind}: {reason}")
        return web.json_response({"status": "refused", "reason": f"replay: {reason}"}, status=409)

    # ------------------------------------------------------------- messages
    def _check_task(self, task_id: Any) -> None:
        if task_id != self.recording.task_id:
            raise Refusal(f"task {task_id!r} not found", TASK_NOT_FOUND)

    async def _message(
        self, request: web.Request, seen: Seen, rpc_id: Any, method: str, params: dict[str, Any]
    ) -> web.StreamResponse:
        message = params.get("message")
        if not isinstance(message, dict) or message.get("role") != "ROLE_USER":
            raise Refusal("not a ROLE_USER message")
        if "taskId" not in message:
            move = self._user_turn(method, message)
            seen.served = move
            return await self._stream(request, rpc_id, move.events, natural_end=move.natural_end)
        if message.get("contextId") != self.context_id:
            raise Refusal(f"contextId {message.get('contextId')!r} is not the task's {self.context_id!r}")
        self._check_task(message.get("taskId"))
        answer = self._matching_answer(message)
        if answer.method == "SendStreamingMessage" and method == "SendMessage":
            raise Refusal(f"the recording streams the answer to {answer.input.input_id}; "
                          "it cannot show what a blocking SendMessage would return")
        self.answers.setdefault(answer.input.input_id, []).append(SentAnswer(method, message))
        self.learned.ids[answer.move.message["messageId"]] = str(message.get("messageId"))
        self.served.append(answer.move)
        seen.served = answer.move
        if method == "SendMessage":
            return web.json_response({**self.learned.ours(answer.move.events[0]), "id": rpc_id})
        # A sub-pipeline answer streamed: the runtime answers with its
        # acknowledgement as the one result of the stream, and closes it.
        return await self._stream(request, rpc_id, answer.move.events, natural_end=True)

    def _user_turn(self, method: str, message: dict[str, Any]) -> Exchange:
        move = self.recording.moves[0]
        recorded = self.recording.user_message
        if self.served:
            raise Refusal("the recording has one user turn; this is a second user message")
        if method != move.kind:
            raise Refusal(f"the recording's user turn is a {move.kind}")
        if message.get("parts") != recorded["parts"]:
            raise Refusal(f"the recording's prompt is {recorded['parts']}, not {message.get('parts')}")
        if not isinstance(message.get("contextId"), str):
            raise Refusal("the user message names no contextId")
        options = (message.get("metadata") or {}).get("iac_code") or {}
        recorded_options = recorded["metadata"]["iac_code"]
        self.learned.ids.update({
            recorded["contextId"]: message["contextId"],
            recorded["messageId"]: str(message.get("messageId")),
            RECORDED_CWD: str(options.get("cwd")),
            recorded_options["rosInvocationId"]: str(options.get("rosInvocationId")),
        })
        self.user_message = message
        self.served.append(move)
        return move

    def _matching_answer(self, message: dict[str, Any]) -> RecordedAnswer:
        """The recorded answer this message gives, if the runtime waits for it now."""
        parts = message.get("parts") or []
        if len(parts) != 1 or not isinstance(parts[0], dict):
            raise Refusal(f"an answer is one part, not {parts}")
        part = parts[0]
        data = part.get("data") if isinstance(part.get("data"), dict) else None
        text = part.get("text")
        waiting = [a for a in self.recording.answers if a.move in self._next_moves()]
        answered = [a for a in self.recording.answers if a.move in self.served]
        for answer in waiting:
            recorded = answer.part
            if data is not None and isinstance(recorded.get("data"), dict):
                if data.get("inputId") != recorded["data"]["inputId"]:
                    continue
                expected = {key: value for key, value in recorded["data"].items() if key != "decision"}
                wrong = {key: data.get(key) for key in expected if data.get(key) != expected[key]}
                if wrong or part.get("mediaType") != recorded.get("mediaType"):
                    raise Refusal(f"the permission answer to {answer.input.input_id} has {wrong or part}; "
                                  f"the runtime asked with {recorded}")
                if data.get("decision") != recorded["data"]["decision"]:
                    raise Refusal(f"the recording decided {recorded['data']['decision']!r} for "
                                  f"{answer.input.input_id}, not {data.get('decision')!r}")
                return answer
            if text is not None and recorded.get("text") == text:
                return answer
        named = data.get("inputId") if data is not None else text
        for answer in answered:
            if named in (answer.part.get("text"), (answer.part.get("data") or {}).get("inputId")):
                raise Refusal(f"a second answer to {answer.input.input_id}: the runtime no longer waits for it")
        wants = [f"{a.input.kind} {a.input.input_id}" for a in waiting] or [str(m) for m in self._next_moves()]
        if text is not None and waiting and all(a.input.kind == "permission" for a in waiting):
            raise Refusal(f"a text message ({text!r}) to a task waiting for {wants}")
        raise Refusal(f"the runtime waits for {wants or 'nothing'}; this message answers none of them: {part}")

    async def _stream(
        self, request: web.Request, rpc_id: Any, events: list[Any], *, natural_end: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event in events:
            data = json.dumps({**self.learned.ours(event), "id": rpc_id}, ensure_ascii=False)
            await response.write(f"data: {data}\n\n".encode())
        if not natural_end:
            # The runtime kept this stream open (the task went on working);
            # the recording has nothing more of it. Held until the client goes.
            await self._closing.wait()
        return response
