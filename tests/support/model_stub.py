"""A scripted OpenAI-compatible chat-completions server for end-to-end tests.

The real A2A runtime (``iac-code a2a``) is pointed at this stub instead of a
model. The stub picks its reply from a marker in the latest user message:

* ``[scenario:normal]``                 a few text deltas
* ``[scenario:reasoning]``              ``reasoning_content`` deltas, then text
* ``[scenario:readonly-tool]``          a ``list_files`` call with ``{"path": "."}``
* ``[scenario:permission file=NAME]``   a ``write_file`` call (asks permission)
* ``[scenario:bash cmd=COMMAND]``       a ``bash`` call (asks permission when it
                                        mutates); ``cmd`` takes the rest of the
                                        marker, so it must come last and must
                                        not contain ``]``
* ``[scenario:slow seconds=N]``         one text delta every 0.2 s for N seconds
* ``[scenario:bashes n=N file=NAME stall=S]``  N permissioned ``bash`` calls in a
                                        row, one per reply: the k-th appends
                                        ``k`` to NAME; after the N-th result, a
                                        closing text. ``stall`` delays each reply
                                        that follows a tool result by S seconds
                                        (a window to kill something in)

When the last message is a tool result the stub closes the turn with a short
text that quotes the result. Without a marker it sends a short default text.

``use_pipeline_script(script, scenario)`` makes it play a recorded pipeline
script instead (``tests/support/pipeline_script.py``): a request whose system
prompt names a pipeline step gets that step's scripted reply, any other
request without a marker gets the script's fallback text. Marker scenarios
keep working meanwhile (``stall_after_tool`` delays the named steps' replies
to a tool result, as ``stall`` does). Use the returned handle as a context manager (or call
``stop_pipeline_script()``) so later tests get the plain stub back.

The server runs on its own event loop in a background thread: it must keep
answering while a test awaits the runtime, whatever event loop (and
pytest-asyncio loop scope) that test runs in.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .chat import message_text
from .eventually import eventually
from .serve import on_loopback

if TYPE_CHECKING:  # annotations only: no runtime dependency on typing_extensions
    from typing_extensions import Self

    from tests.support.pipeline_script import ScriptedReply, ScriptPlayer

LOOPBACK = "127.0.0.1"
MODEL_NAME = "stub-model"
DEFAULT_TEXT = "Hello from the scripted model."
NORMAL_TEXT = "Hello! This is a scripted reply."
REASONING = ("Thinking about the answer.", "Reasoned answer.")
SLOW_TICK_SECONDS = 0.2

_MARKER = re.compile(r"\[scenario:(?P<name>[a-z-]+)(?P<args>[^\]]*)\]")


@dataclass(frozen=True)
class Scenario:
    """A marker parsed from a user message."""

    name: str
    args: dict[str, str] = field(default_factory=dict)


@dataclass
class RecordedCall:
    """One chat-completions request the stub received, and how it answered."""

    path: str
    body: dict[str, Any]
    reply: str  # scenario name, "tool-result", "default", or a pipeline script label
    outcome: str = "streaming"  # then "completed", or "disconnected" if the client hung up
    #: The OpenAI ``usage`` the reply reported (set when it is sent).
    usage: dict[str, Any] | None = None

    @property
    def completed(self) -> bool:
        return self.outcome == "completed"

    def contains(self, text: str) -> bool:
        return any(text in message_text(m) for m in self.body.get("messages", []))


def parse_scenario(text: str) -> Scenario | None:
    """Return the first ``[scenario:...]`` marker in ``text``, if any."""
    match = _MARKER.search(text)
    if match is None:
        return None
    return Scenario(match["name"], _parse_args(match["args"].strip()))


def _parse_args(raw: str) -> dict[str, str]:
    # `cmd=` swallows the rest of the marker, so shell commands may contain spaces.
    args: dict[str, str] = {}
    head, sep, command = raw.partition("cmd=")
    for token in head.split():
        key, _, value = token.partition("=")
        args[key] = value
    if sep:
        args["cmd"] = command.strip()
    return args


def latest_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""


# ---------------------------------------------------------------- chunk making


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


PROMPT_TOKENS = 100


def usage_of(output_tokens: int, scenario: Scenario | None) -> dict[str, Any]:
    """The OpenAI ``usage`` of one reply. A scenario's ``cached=N`` and
    ``reasoning=M`` report N cache-read prompt tokens (inside the prompt count,
    as OpenAI counts them) and M reasoning tokens (inside the completion count)."""
    args = scenario.args if scenario is not None else {}
    reasoning = int(args.get("reasoning", "0"))
    completion = output_tokens + reasoning
    usage: dict[str, Any] = {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": completion,
        "total_tokens": PROMPT_TOKENS + completion,
    }
    if "cached" in args:
        usage["prompt_tokens_details"] = {"cached_tokens": int(args["cached"])}
    if "reasoning" in args:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def _pieces(text: str, count: int = 3) -> list[str]:
    """Split text into ``count`` roughly equal, non-empty pieces."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _exact_pieces(text: str, count: int) -> list[str]:
    """Split text into exactly ``count`` non-empty pieces (fewer only when it is shorter)."""
    count = max(1, min(count, len(text)))
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def text_chunks(text: str, count: int | None = None) -> list[dict[str, Any]]:
    pieces = _pieces(text) if count is None else _exact_pieces(text, count)
    return [_chunk({"role": "assistant", "content": p}) for p in pieces]


def reasoning_chunks(text: str, count: int | None = None) -> list[dict[str, Any]]:
    pieces = _pieces(text) if count is None else _exact_pieces(text, count)
    return [_chunk({"role": "assistant", "reasoning_content": p}) for p in pieces]


def written_content(file_name: str) -> str:
    """What the ``permission`` scenario asks ``write_file`` to write."""
    return f"written by the model stub for {file_name}\n"


def tool_call_chunks(name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """A tool call streamed as the OpenAI API does: id and name first, then JSON pieces."""
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    head = {"index": 0, "id": call_id, "type": "function"}
    first = _chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
    rest = [
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for piece in _pieces(json.dumps(arguments))
    ]
    return [first, *rest]


def pipeline_chunks(reply: ScriptedReply) -> list[dict[str, Any]]:
    """A pipeline script reply as streamed chunks: reasoning, text, then the tool call.
    Reasoning is cut into as many deltas as the text."""
    chunks: list[dict[str, Any]] = []
    if reply.reasoning:
        chunks += reasoning_chunks(reply.reasoning, reply.chunks)
    if reply.text:
        chunks += text_chunks(reply.text, reply.chunks)
    if reply.tool_call is not None:
        chunks += tool_call_chunks(reply.tool_call.name, reply.tool_call.arguments)
    return chunks


def scripted_reply(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Pick the reply for a request: (reply label, chunks before finish/usage).

    The finish reason follows from the chunks: ``tool_calls`` when one is present.
    ``slow`` is not handled here because it is paced, see ``_stream_slow``.
    """
    scenario = parse_scenario(latest_user_text(messages))
    if scenario is not None and scenario.name == "bashes":
        return scenario.name, bashes_chunks(scenario, messages)
    if messages and messages[-1].get("role") == "tool":
        result = message_text(messages[-1]).strip().splitlines() or ["(empty)"]
        return "tool-result", text_chunks(f"Finished: {result[0][:80]}")
    if scenario is None:
        return "default", text_chunks(DEFAULT_TEXT)
    return scenario.name, _scenario_chunks(scenario)


def bashes_command(file_name: str, step: int) -> str:
    """The command the ``bashes`` scenario runs at its ``step``-th call (from 1)."""
    return f"echo {step} >> {file_name}"


def bashes_chunks(scenario: Scenario, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The next reply of a ``bashes`` turn: counted by the tool results that
    follow the turn's user message, so each reply asks for the next command."""
    total = int(scenario.args.get("n", "2"))
    file_name = scenario.args.get("file", "log.txt")
    marked = [index for index, message in enumerate(messages)
              if message.get("role") == "user" and "[scenario:bashes" in message_text(message)]
    start = marked[-1] if marked else 0
    done = sum(1 for message in messages[start:] if message.get("role") == "tool")
    if done >= total:
        return text_chunks(f"All {total} commands ran.")
    step = done + 1
    return text_chunks(f"Step {step} of {total}.") + tool_call_chunks("bash", {"command": bashes_command(file_name, step)})


def _scenario_chunks(scenario: Scenario) -> list[dict[str, Any]]:
    args = scenario.args
    if scenario.name == "normal":
        return text_chunks(NORMAL_TEXT)
    if scenario.name == "reasoning":
        return reasoning_chunks(REASONING[0]) + text_chunks(REASONING[1])
    if scenario.name == "readonly-tool":
        return tool_call_chunks("list_files", {"path": "."})
    if scenario.name == "permission":
        file_name = args.get("file", "x.txt")
        arguments = {"path": file_name, "content": written_content(file_name)}
        return text_chunks("I will write the file.") + tool_call_chunks("write_file", arguments)
    if scenario.name == "bash":
        return tool_call_chunks("bash", {"command": args.get("cmd", "true")})
    return text_chunks(f"Hello from the scripted model ({scenario.name}).")


# ---------------------------------------------------------------- the server


class ModelStub:
    """The stub server. ``start()``/``stop()`` are blocking and thread-safe.

    Use it as a (sync or async) context manager, or call ``start``/``stop``.
    ``url`` is the OpenAI base URL to give the runtime (``.../v1``).
    """

    def __init__(self, host: str = LOOPBACK, tick_seconds: float = SLOW_TICK_SECONDS) -> None:
        self.host = host
        self.tick_seconds = tick_seconds
        self.port = 0
        self._calls: list[RecordedCall] = []
        self._lock = threading.Lock()
        self._pipeline: ScriptPlayer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> Self:
        ready = threading.Event()
        errors: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._serve, args=(ready, errors), name="model-stub", daemon=True
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("model stub did not start within 10 s")
        if errors:
            raise RuntimeError("model stub failed to start") from errors[0]
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def _serve(self, ready: threading.Event, errors: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._listen())
        except (OSError, RuntimeError) as exc:  # e.g. bind failure: reported by start()
            errors.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        loop.run_forever()
        loop.close()

    async def _listen(self) -> None:
        # A model API takes images (base64) of some MiB; aiohttp's default stops at 1 MiB.
        app = web.Application(client_max_size=32 * 1024 * 1024)
        for path in ("/chat/completions", "/v1/chat/completions"):
            app.router.add_post(path, self._handle)
        # A short shutdown timeout: a test may leave a `slow` stream running.
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await on_loopback(self._runner, self.host)
        self.port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- pipeline script

    def use_pipeline_script(
        self, script: dict[str, Any], scenario: str, stall_after_tool: dict[str, float] | None = None
    ) -> PipelineScriptInUse:
        """Play ``scenario`` of a pipeline model script (see ``pipeline_script``)
        until ``stop_pipeline_script()`` or the end of the returned handle's ``with``;
        ``stall_after_tool``: seconds the named steps wait to answer a tool result."""
        from tests.support.pipeline_script import ScriptPlayer  # it reads messages with this module

        player = ScriptPlayer(script, scenario, stall_after_tool)
        with self._lock:
            self._pipeline = player
        return PipelineScriptInUse(self, player)

    def stop_pipeline_script(self) -> None:
        with self._lock:
            self._pipeline = None

    @property
    def pipeline_player(self) -> ScriptPlayer | None:
        with self._lock:
            return self._pipeline

    def _pick(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        """The reply label and chunks for a (non-slow) request."""
        player = self.pipeline_player
        if player is not None and parse_scenario(latest_user_text(messages)) is None:
            reply = player.reply(messages)
            return reply.label, pipeline_chunks(reply)
        return scripted_reply(messages)

    # -- recorded requests (tests assert on these)

    @property
    def calls(self) -> list[RecordedCall]:
        with self._lock:
            return list(self._calls)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body received, oldest first."""
        return [call.body for call in self.calls]

    def calls_with(self, text: str) -> list[RecordedCall]:
        """Calls whose messages contain ``text`` (use a unique word per test)."""
        return [call for call in self.calls if call.contains(text)]

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()

    async def wait_for_calls(
        self, text: str, count: int = 1, timeout: float = 10.0
    ) -> list[RecordedCall]:
        """Wait until ``count`` calls containing ``text`` arrived (for flows that
        do not block on the model, e.g. a disconnect test). Never blocks the loop:
        the code under test may share it."""

        def enough() -> list[RecordedCall]:
            calls = self.calls_with(text)
            return calls if len(calls) >= count else []

        return await eventually(enough, f"{count} model calls with {text!r}", timeout=timeout, interval=0.05)

    # -- request handling

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body.get("messages", [])
        scenario = parse_scenario(latest_user_text(messages))
        is_slow = scenario is not None and scenario.name == "slow"
        is_slow = is_slow and messages[-1].get("role") != "tool"
        label, chunks = ("slow", []) if is_slow else self._pick(messages)
        stall = float(scenario.args.get("stall", "0")) if scenario is not None else 0.0
        player = self.pipeline_player
        if player is not None and scenario is None:
            stall = player.stall(messages)
        if stall and messages and messages[-1].get("role") == "tool":
            await _stall(request, stall)
        call = RecordedCall(request.path, body, label)
        with self._lock:
            self._calls.append(call)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            if is_slow:
                assert scenario is not None
                await self._stream_slow(response, float(scenario.args.get("seconds", "5")), call, scenario)
            else:
                await self._stream(response, chunks, call, scenario)
            call.outcome = "completed"
        except ConnectionResetError:
            # The runtime hung up (a cancelled turn): disconnect tests look for this.
            call.outcome = "disconnected"
        return response

    async def _stream(self, response: web.StreamResponse, chunks: list[dict[str, Any]], call: RecordedCall,
                      scenario: Scenario | None) -> None:
        for chunk in chunks:
            await _send(response, chunk)
        has_tool = any("tool_calls" in c["choices"][0]["delta"] for c in chunks)
        call.usage = usage_of(len(chunks), scenario)
        await _finish(response, "tool_calls" if has_tool else "stop", call.usage)

    async def _stream_slow(self, response: web.StreamResponse, seconds: float, call: RecordedCall,
                           scenario: Scenario | None) -> None:
        ticks = max(1, round(seconds / self.tick_seconds))
        for tick in range(ticks):
            await _send(response, _chunk({"role": "assistant", "content": f"tick {tick} "}))
            await asyncio.sleep(self.tick_seconds)
        call.usage = usage_of(ticks, scenario)
        await _finish(response, "stop", call.usage)


class PipelineScriptInUse:
    """The handle ``use_pipeline_script`` returns: leaving its ``with`` block
    stops the script (only if it is still the one playing)."""

    def __init__(self, stub: ModelStub, player: ScriptPlayer) -> None:
        self.stub = stub
        self.player = player

    def __enter__(self) -> ScriptPlayer:
        return self.player

    def __exit__(self, *exc: object) -> None:
        if self.stub.pipeline_player is self.player:
            self.stub.stop_pipeline_script()


async def _stall(request: web.Request, seconds: float) -> None:
    """Wait ``seconds`` before replying, or until the runtime hung up (a
    killed runtime leaves no reply waiting in the stub)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(0.1)


async def _send(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(payload)}\n\n".encode())


async def _finish(response: web.StreamResponse, reason: str, usage: dict[str, Any]) -> None:
    await _send(response, _chunk({}, finish=reason))
    await _send(response, {**_chunk({}), "choices": [], "usage": usage})
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
