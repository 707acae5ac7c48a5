"""A small terminal client for the aguiadapter AG-UI server (aiohttp only).

It streams a run to the terminal (text as it arrives, reasoning, tool calls,
their results and errors). When a run ends with an interrupt it asks you:
y/n for a permission, an option number (or free text, where allowed) for a
question. It then sends the resume on the same thread and keeps streaming.

    python examples/terminal_client.py "permission notes.txt"     # one turn, then exit
    python examples/terminal_client.py                            # prompt loop (Ctrl-D ends)
    python examples/terminal_client.py --url http://127.0.0.1:8000/ --token T --thread my-thread --cwd /tmp

Against the embedded demo runtime (``python -m aguiadapter --demo``), the first word
of a message picks a behaviour: think, tool, slow, fail, permission [file],
question. Ctrl-C during a run closes the stream, and the server then cancels
the runtime's work. At an interrupt prompt, Ctrl-D leaves the interrupt
pending (it expires at its expiresAt); typing /cancel declines it.

Exit status (one-shot mode): 0 when the turn finished, 1 when it ended with an
error, 2 when it stopped at an unanswered interrupt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from typing import Any

import aiohttp

TOOL_RESULT_PREVIEW = 400


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class Printer:
    """Turns AG-UI events into terminal lines; text deltas are printed as they come."""

    def __init__(self) -> None:
        self.tool_names: dict[str, str] = {}
        self.tool_args: dict[str, str] = {}
        self.mid_line = False
        #: The text message whose deltas the current line shows (pipelines interleave several).
        self.text_id: str | None = None

    def write(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        self.mid_line = not text.endswith("\n")
        if not self.mid_line:
            self.text_id = None

    def newline(self) -> None:
        """End the current line, if one is open."""
        if self.mid_line:
            self.write("\n")

    def line(self, text: str) -> None:
        self.newline()
        self.write(text + "\n")

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "TEXT_MESSAGE_START":
            self.text_id = None
        elif kind == "TEXT_MESSAGE_CONTENT":
            if event["messageId"] != self.text_id or not self.mid_line:
                self.newline()
                self.write("agent> ")
                self.text_id = event["messageId"]
            self.write(event["delta"])
        elif kind == "TEXT_MESSAGE_END":
            if event["messageId"] == self.text_id:
                self.newline()
                self.text_id = None
        elif kind == "REASONING_START":
            self.newline()
            self.write("(thinking) ")
        elif kind == "REASONING_MESSAGE_CONTENT":
            self.write(event["delta"])
        elif kind == "REASONING_END":
            self.newline()
        elif kind == "TOOL_CALL_START":
            self.tool_names[event["toolCallId"]] = event["toolCallName"]
            self.tool_args[event["toolCallId"]] = ""
        elif kind == "TOOL_CALL_ARGS":
            self.tool_args[event["toolCallId"]] = self.tool_args.get(event["toolCallId"], "") + event["delta"]
        elif kind == "TOOL_CALL_END":
            call_id = event["toolCallId"]
            self.line(f"[tool] {self.tool_names.get(call_id, 'tool')} {self.tool_args.get(call_id, '')}".rstrip())
        elif kind == "TOOL_CALL_RESULT":
            content = str(event.get("content", ""))
            if len(content) > TOOL_RESULT_PREVIEW:
                content = content[:TOOL_RESULT_PREVIEW] + "..."
            self.line(f"[result] {content}")
        elif kind == "STEP_STARTED":
            self.line(f"[step] {event['stepName']} started")
        elif kind == "STEP_FINISHED":
            self.line(f"[step] {event['stepName']} finished")
        elif kind == "CUSTOM":
            self.custom(event.get("name"), event.get("value"))
        elif kind == "RUN_ERROR":
            self.line(f"[error {event.get('code', '?')}] {event.get('message', '')}")

    def custom(self, name: Any, value: Any) -> None:
        if not isinstance(value, dict):
            return
        if name == "iac-code.tool-progress.v1":
            done = ""
            if value.get("current") is not None and value.get("total") is not None:
                done = f" ({value['current']:g}/{value['total']:g})"
            self.line(f"[progress] {value.get('message', '')}{done}")
        elif name == "iac-code.pipeline.v1":
            self.line(f"[pipeline] {value.get('eventType', '?')}")
        elif name == "iac-code.artifact.v1":
            urls = [part.get("url") for part in value.get("parts", []) if isinstance(part, dict) and part.get("url")]
            self.line(f"[artifact] {value.get('name', value.get('artifactId', ''))} {' '.join(urls)}".rstrip())


async def sse_events(response: aiohttp.ClientResponse) -> Any:
    """Yield the JSON of each ``data:`` event; comments (heartbeats) are skipped."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            data = [line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
            if data:
                yield json.loads(b"\n".join(data))


class Client:
    """One conversation (thread) with the server."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.url = args.url
        self.thread_id = args.thread
        self.cwd = os.path.abspath(args.cwd)
        self.language = args.language
        self.run_mode = args.run_mode
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if args.token:
            self.headers["Authorization"] = f"Bearer {args.token}"
        self.printer = Printer()

    def body(self, ros_invocation_id: str, messages: list[dict[str, Any]],
             resume: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        iac: dict[str, Any] = {"schemaVersion": 1, "rosInvocationId": ros_invocation_id, "cwd": self.cwd}
        if self.language:
            iac["preferredLanguage"] = self.language
        if self.run_mode:
            iac["runMode"] = self.run_mode
        body: dict[str, Any] = {
            "threadId": self.thread_id,
            "runId": new_id("run"),
            "state": {},
            "messages": messages,
            "tools": [],
            "context": [],
            "forwardedProps": {"iacCode": iac},
        }
        if resume:
            body["resume"] = resume
        return body

    async def turn(self, session: aiohttp.ClientSession, text: str) -> int:
        """One user turn, with every interrupt it raises answered; returns the exit status."""
        # One rosInvocationId per execution: the turn and all of its resumes share it.
        ros_invocation_id = new_id("inv")
        message = {"id": new_id("msg"), "role": "user", "content": text}
        body = self.body(ros_invocation_id, [message])
        while True:
            outcome = await self.stream(session, body)
            if outcome is None:
                return 1
            if outcome.get("type") != "interrupt":
                return 0
            answers = [self.ask(interrupt) for interrupt in outcome.get("interrupts", [])]
            if any(answer is None for answer in answers):
                self.printer.line("[pending] no answer given; the interrupt stays pending until it expires")
                return 2
            body = self.body(ros_invocation_id, [], resume=[a for a in answers if a is not None])

    async def stream(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> dict[str, Any] | None:
        """POST one run and print it; returns RUN_FINISHED's outcome, or None after an error."""
        async with session.post(self.url, json=body, headers=self.headers) as response:
            if response.status != 200:
                try:
                    error = (await response.json())["error"]
                    self.printer.line(f"[error {error['code']}] {error['message']} (HTTP {response.status})")
                except (aiohttp.ContentTypeError, ValueError, KeyError, TypeError):
                    self.printer.line(f"[error HTTP {response.status}] {await response.text()}")
                return None
            ending: dict[str, Any] | None = None
            # Read to the end of the response, not just to RUN_FINISHED: the server
            # releases the thread just before it closes the stream, so a resume sent
            # earlier could be refused with THREAD_BUSY.
            async for event in sse_events(response):
                self.printer.event(event)
                if event.get("type") in ("RUN_FINISHED", "RUN_ERROR"):
                    ending = event
        if ending is None:
            self.printer.line("[error] the stream ended without RUN_FINISHED or RUN_ERROR")
            return None
        if ending["type"] == "RUN_ERROR":
            return None
        outcome: dict[str, Any] = ending.get("outcome") or {"type": "success"}
        return outcome

    def ask(self, interrupt: dict[str, Any]) -> dict[str, Any] | None:
        """Ask the user to answer one interrupt; None when stdin is closed."""
        metadata = interrupt.get("metadata") or {}
        answer: dict[str, Any] = {"interruptId": interrupt["id"]}
        self.printer.line(f"[interrupt] {interrupt.get('message', 'Input required')}")
        if metadata.get("safeSummary"):
            self.printer.line(f"            {metadata['safeSummary']}")
        if metadata.get("kind") == "permission" or _is_permission(interrupt.get("responseSchema")):
            while True:
                reply = prompt("Allow once? [y/n, /cancel declines] ")
                if reply is None:
                    return None
                if reply.lower() in ("y", "yes", "n", "no"):
                    decision = "allow_once" if reply.lower().startswith("y") else "deny"
                    return {**answer, "status": "resolved", "payload": {"decision": decision}}
                if reply == "/cancel":
                    return {**answer, "status": "cancelled"}
        options, free_text = _choices(interrupt)
        for number, option in enumerate(options, 1):
            self.printer.line(f"  {number}) {option['label']} [{option['id']}]")
        free_prompt = metadata.get("freeTextPrompt") or "type an answer"
        if options and free_text:
            question = f"Answer (number, or {free_prompt}; /cancel declines): "
        elif options:
            question = "Answer (number; /cancel declines): "
        else:
            question = f"Answer ({free_prompt}; /cancel declines): "
        while True:
            reply = prompt(question)
            if reply is None:
                return None
            if reply == "/cancel":
                return {**answer, "status": "cancelled"}
            picked = _pick(options, reply)
            if picked is not None:
                return {**answer, "status": "resolved", "payload": {"selectedId": picked}}
            if free_text and reply:
                return {**answer, "status": "resolved", "payload": {"freeText": reply}}


def _is_permission(schema: Any) -> bool:
    return isinstance(schema, dict) and "decision" in (schema.get("properties") or {})


def _choices(interrupt: dict[str, Any]) -> tuple[list[dict[str, str]], bool]:
    """Options and whether free text is allowed, read from responseSchema (metadata as a fallback)."""
    schema = interrupt.get("responseSchema") or {}
    options: list[dict[str, str]] = []
    free_text = False
    for branch in schema.get("oneOf") or []:
        properties = branch.get("properties") or {}
        if "selectedId" in properties:
            selected = properties["selectedId"]
            option_id = str(selected.get("const"))
            options.append({"id": option_id, "label": str(selected.get("title") or option_id)})
        elif "freeText" in properties:
            free_text = True
    if not options:
        for option in (interrupt.get("metadata") or {}).get("options") or []:
            options.append({"id": str(option.get("id")), "label": str(option.get("label") or option.get("id"))})
    return options, free_text


def _pick(options: list[dict[str, str]], reply: str) -> str | None:
    if reply.isdigit() and 1 <= int(reply) <= len(options):
        return options[int(reply) - 1]["id"]
    for option in options:
        if reply.lower() in (option["id"].lower(), option["label"].lower()):
            return option["id"]
    return None


def prompt(text: str) -> str | None:
    """One line from stdin (None at end of input); echoed when stdin is not a terminal."""
    try:
        reply = input(text).strip()
    except EOFError:
        print()
        return None
    if not sys.stdin.isatty():
        print(reply)
    return reply


async def main(args: argparse.Namespace) -> int:
    client = Client(args)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=args.read_timeout)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        if args.message:
            return await client.turn(session, " ".join(args.message))
        print(f"thread {client.thread_id} in {client.cwd}; an empty line or Ctrl-D ends")
        while True:
            text = prompt("you> ")
            if not text:
                return 0
            await client.turn(session, text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Stream AG-UI runs to the terminal and answer interrupts.")
    parser.add_argument("message", nargs="*", help="one message to send (default: a prompt loop)")
    parser.add_argument("--url", default="http://127.0.0.1:8000/", help="the server's POST / URL")
    parser.add_argument("--token", default=os.environ.get("IAC_CODE_AGUI_AUTH_TOKEN"),
                        help="bearer token (default $IAC_CODE_AGUI_AUTH_TOKEN)")
    parser.add_argument("--thread", default=new_id("terminal"), help="threadId (default: a new one)")
    parser.add_argument("--cwd", default=os.getcwd(), help="workspace folder (default: the current folder)")
    parser.add_argument("--language", default=None, help="preferredLanguage, e.g. zh-CN")
    parser.add_argument("--run-mode", choices=("normal", "pipeline"), default=None,
                        help="forwardedProps.iacCode.runMode (default: the runtime decides)")
    parser.add_argument("--read-timeout", type=float, default=60.0,
                        help="seconds without a byte before giving up (the server sends a heartbeat every 15 s)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse_args())))
    except KeyboardInterrupt:
        print("\n[stopped] the stream was closed; the server cancels the active run")
        sys.exit(130)
