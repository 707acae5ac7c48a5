"""The OpenAPI description (aguiadapter/web/openapi.json) against the code.

The document is read from the package, validated as OpenAPI 3.1, compared
with the app's routes and with ``ErrorCode``, then held against the live
adapter (demo runtime behind it, loopback only): every real flow of the
integrator guide, then a bounded schemathesis run with positive and negative
data. A response whose status is not documented, whose media type or headers
differ, or whose JSON body (or any SSE event) breaks its schema fails the
test, and so does any 5xx.

Schemathesis is synchronous (``requests``); the adapter lives on the test's
event loop, so every HTTP call is made from a worker thread.

``AGUIADAPTER_FUZZ_EXAMPLES`` raises the number of generated examples per
operation and mode (default 60) for a longer local run.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

import schemathesis
from aguiadapter.config import Config
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.errors import ErrorCode
from aguiadapter.protocol.parsing import parse_run_input
from aguiadapter.protocol.interrupts import PERMISSION_SCHEMA
from aguiadapter.web.app import create_app
from aguiadapter.web.openapi import render_document, render_text
from aguiadapter.web.keys import SERVICE
from schemathesis import GenerationMode
from schemathesis import checks as st_checks
from schemathesis.core.failures import Failure, FailureGroup
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import parse_sse
from tests.support.eventually import eventually

CANCEL_PATH = "/extensions/iac-code/v1/executions/{executionId}/cancel"
TOKEN = "openapi-test-token"
FUZZ_EXAMPLES = int(os.environ.get("AGUIADAPTER_FUZZ_EXAMPLES", "60"))
#: Codes that exist in ErrorCode but no route answers (kept for completeness).
UNUSED_CODES: set[str] = set()
#: Every check about the response itself (negative_data_rejection is added for fuzzing).
RESPONSE_CHECKS = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_headers_conformance,
    st_checks.response_schema_conformance,
]
T = TypeVar("T")


def load_spec() -> dict[str, Any]:
    """The document as packaged (aguiadapter/web/openapi.json)."""
    text = resources.files("aguiadapter.web").joinpath("openapi.json").read_text(encoding="utf-8")
    spec: dict[str, Any] = json.loads(text)
    return spec


def load_schema() -> Any:
    """The document as a schemathesis schema (explicit config: no file discovery)."""
    config = schemathesis.Config.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": ["4xx"]}}})
    return schemathesis.openapi.from_dict(load_spec(), config=config)


def component_validator(name: str) -> Draft202012Validator:
    """A JSON Schema validator for ``#/components/schemas/<name>``."""
    uri = "urn:aguiadapter:openapi"
    registry: Registry[Any] = Registry().with_resource(uri, Resource(contents=load_spec(), specification=DRAFT202012))
    return Draft202012Validator({"$ref": f"{uri}#/components/schemas/{name}"}, registry=registry)


def failure_text(exc: BaseException) -> str:
    return str(exc)[:3000]


class Conformance:
    """Sends requests from a worker thread and judges each response with schemathesis."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.schema = load_schema()
        self.session = requests.Session()

    def operation(self, method: str, path: str) -> Any:
        return self.schema[path][method]

    def _send(self, method: str, path: str, *, execution_id: str | None = None, json_body: Any = None,
              data: bytes | None = None, headers: dict[str, str] | None = None,
              path_parameters: dict[str, str] | None = None, query: str = "") -> requests.Response:
        operation = self.operation(method, path)
        all_headers = {"Accept": "text/event-stream"} if method == "POST" else {}
        if json_body is not None:
            data = json.dumps(json_body).encode()
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        parameters = dict(path_parameters or {})
        if execution_id is not None:
            parameters["executionId"] = execution_id
        url_path = path
        for name, value in parameters.items():
            url_path = url_path.replace("{" + name + "}", value)
        response = self.session.request(method, self.url + url_path + query, data=data, headers=all_headers,
                                        timeout=30)
        case = operation.Case(path_parameters=parameters, media_type="application/json")
        case.validate_response(response, checks=RESPONSE_CHECKS)
        return response

    async def send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return await asyncio.to_thread(self._send, method, path, **kwargs)

    async def run(self, body: Any, **kwargs: Any) -> requests.Response:
        return await self.send("POST", "/", json_body=body, **kwargs)

    async def cancel(self, execution_id: str, body: Any, **kwargs: Any) -> requests.Response:
        return await self.send("POST", CANCEL_PATH, execution_id=execution_id, json_body=body, **kwargs)


def events_of(response: requests.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    events, _ = parse_sse(response.content)
    validator = component_validator("AgUiEvent")
    for event in events:
        validator.validate(event)
    return events


def error_code(response: requests.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


def resume_body(thread_id: str, cwd: Path, answers: list[dict[str, Any]]) -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
    body["resume"] = answers
    return body


@pytest.fixture
async def token_adapter(tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[RunningAdapter]:
    """The adapter with a bearer token and /metrics, state under ``tmp_path``."""
    running = await start_adapter(
        tmp_path / "secured-state",
        demo.url,
        allowed_cwds=(str(tmp_path / "workspaces"),),
        auth_token=TOKEN,
        metrics=True,
    )
    try:
        yield running
    finally:
        await running.close()


# --------------------------------------------------------------- the document


def test_the_document_is_valid_openapi_3_1() -> None:
    spec = load_spec()
    assert spec["openapi"].startswith("3.1.")
    errors = [error.message for error in OpenAPIV31SpecValidator(spec).iter_errors()]
    assert errors == []


def test_every_route_of_the_app_is_documented(tmp_path: Path) -> None:
    app = create_app(Config(state_dir=tmp_path, demo=True, metrics=True))
    served = {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    documented = {(method.upper(), path) for path, item in load_spec()["paths"].items() for method in item}
    assert served - documented == set(), "routes the document does not describe"
    # GET /openapi.json is documented ahead of its route (see test_the_served_document_is_the_packaged_one).
    assert documented - served <= {("GET", "/openapi.json")}, "documented routes the app does not serve"


def test_the_committed_document_is_current() -> None:
    """Its request schemas are the input schema: run python -m aguiadapter.web.openapi --write."""
    text = resources.files("aguiadapter.web").joinpath("openapi.json").read_text(encoding="utf-8")
    assert render_text(render_document(json.loads(text))) == text


def test_every_component_schema_is_referenced() -> None:
    spec = load_spec()
    text = json.dumps(spec)
    unused = [name for name in spec["components"]["schemas"] if f'"#/components/schemas/{name}"' not in text]
    assert unused == [], "stale components: remove them from openapi.json"


def _codes_of(response: dict[str, Any]) -> list[str]:
    media = response.get("content", {}).get("application/json", {})
    codes = media.get("schema", {}).get("properties", {}).get("error", {})
    return list(codes.get("properties", {}).get("code", {}).get("enum", []))


def test_documented_error_codes_have_their_real_http_status() -> None:
    spec = load_spec()
    documented: set[str] = set()
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if "$ref" in response:
                    response = spec["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
                for code in _codes_of(response):
                    assert ErrorCode[code].status == int(status), f"{method.upper()} {path}: {code} is not {status}"
                    documented.add(code)
    # 405 belongs to no documented operation: the method is the undocumented part.
    (method_not_allowed,) = _codes_of(spec["components"]["responses"]["MethodNotAllowed"])
    assert ErrorCode[method_not_allowed].status == 405
    documented.add(method_not_allowed)
    stream = spec["components"]["schemas"]["RunErrorEvent"]["properties"]["code"]["enum"]
    assert set(stream) <= {code.name for code in ErrorCode}
    every = {code.name for code in ErrorCode} - UNUSED_CODES
    assert every - documented - set(stream) == set(), "error codes missing from the document"


def test_the_request_examples_are_accepted_by_the_parser() -> None:
    spec = load_spec()
    examples = spec["paths"]["/"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    validator = component_validator("RunAgentInput")
    for name, example in examples.items():
        validator.validate(example["value"])
        parse_run_input(example["value"])  # raises AdapterError if the server would refuse it
        assert name


def test_the_permission_schema_is_the_one_the_server_sends() -> None:
    spec = load_spec()
    sse = spec["paths"]["/"]["post"]["responses"]["200"]["content"]["text/event-stream"]
    example = sse["examples"]["permissionInterrupt"]["value"]
    events, _ = parse_sse(example.encode())
    validator = component_validator("AgUiEvent")
    for event in events:
        validator.validate(event)
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    assert interrupt["responseSchema"] == PERMISSION_SCHEMA


def test_the_integrators_guide_examples_conform() -> None:
    """Every event, request body and resume entry shown in docs/integrators-guide.md."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "integrators-guide.md").read_text(encoding="utf-8")
    blocks = [block.split("\n", 1) for block in guide.split("```")[1::2]]
    events = component_validator("AgUiEvent")
    bodies = component_validator("RunAgentInput")
    entries = component_validator("ResumeEntry")
    cancels = component_validator("CancelRequest")
    counted = {"event": 0, "body": 0, "entry": 0, "cancel": 0}
    for language, text in blocks:
        if language == "text":
            for line in text.splitlines():
                if line.startswith("data: "):
                    events.validate(json.loads(line[len("data: "):]))
                    counted["event"] += 1
        elif language in ("json", "http"):
            body = json.loads(text[text.index("{"):]) if language == "http" else json.loads(text)
            if "type" in body:
                events.validate(body)
                counted["event"] += 1
            elif "threadId" in body and "runId" in body:
                bodies.validate(body)
                parse_run_input(body)
                counted["body"] += 1
            elif "interruptId" in body:
                entries.validate(body)
                counted["entry"] += 1
            elif "rosInvocationId" in body:
                cancels.validate(body)
                counted["cancel"] += 1
    assert counted["event"] > 20 and counted["body"] >= 3 and counted["entry"] >= 2 and counted["cancel"], counted


def test_the_event_schema_refuses_what_clients_refuse() -> None:
    validator = component_validator("AgUiEvent")
    assert not validator.is_valid({"type": "RUN_STARTED", "threadId": "t", "runId": "r", "parentRunId": None,
                                   "protocolVersion": "1.0"})
    assert not validator.is_valid({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": ""})
    assert not validator.is_valid({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                                   "outcome": {"type": "interrupt", "interrupts": []}})
    assert not validator.is_valid({"type": "CUSTOM", "name": "iac-code.session.v1", "value": {"schemaVersion": 1}})
    assert validator.is_valid({"type": "CUSTOM", "name": "someone-else.v1", "value": None})


# ------------------------------------------------------------ the live server


async def test_the_documented_flows_conform(adapter: RunningAdapter, demo: DemoRuntime, workspace: Path) -> None:
    api = Conformance(adapter.url)
    cwd = str(workspace)

    health = await api.send("GET", "/health")
    assert health.json()["protocolVersion"] == "1.0"

    # A permission interrupt, then everything a client can get wrong about it.
    first = run_body(thread_id="oa-perm", text="permission a.txt", cwd=cwd, run_id="run-1")
    events = events_of(await api.run(first))
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["outcome"]["type"] == "interrupt"
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    assert error_code(await api.run(first)) == "DUPLICATE_RUN_ID"
    assert error_code(await api.run({**first, "state": {"changed": True}})) == "RUN_ID_CONFLICT"
    another_turn = run_body(thread_id="oa-perm", text="hello", cwd=cwd)
    assert error_code(await api.run(another_turn)) == "RESUME_REQUIRED"
    elsewhere = run_body(thread_id="oa-perm", text="hello", cwd=str(workspace.parent))
    assert error_code(await api.run(elsewhere)) == "THREAD_BINDING_CONFLICT"
    answer = {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}
    bad = resume_body("oa-perm", workspace, [{**answer, "payload": {"decision": "always"}}])
    assert error_code(await api.run(bad)) == "RESUME_PAYLOAD_INVALID"
    unknown = resume_body("oa-perm", workspace, [{**answer, "interruptId": "permission-x"}])
    assert error_code(await api.run(unknown)) == "UNKNOWN_INTERRUPT"
    twice = resume_body("oa-perm", workspace, [answer, answer])
    assert error_code(await api.run(twice)) == "INCOMPLETE_RESUME"
    resumed = events_of(await api.run(resume_body("oa-perm", workspace, [answer])))
    assert any(e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == interrupt["toolCallId"] for e in resumed)
    assert resumed[-1]["outcome"] == {"type": "success"}
    assert error_code(await api.run(resume_body("oa-perm", workspace, [answer]))) == "RESUME_ALREADY_APPLIED"
    assert demo.state.tool_runs["write_file"] == 1

    # The thread route, the re-attach route and the capabilities document.
    thread = (await api.send("GET", "/threads/{threadId}", path_parameters={"threadId": "oa-perm"})).json()
    assert thread["state"] == "idle" and thread["pendingInterrupts"] == []
    unknown_thread = await api.send("GET", "/threads/{threadId}", path_parameters={"threadId": "oa-nobody"})
    assert error_code(unknown_thread) == "THREAD_NOT_FOUND"
    run = {"threadId": "oa-perm", "runId": "run-1"}
    replay = await api.send("GET", "/threads/{threadId}/runs/{runId}/events", path_parameters=run,
                            headers={"Accept": "text/event-stream"})
    assert events_of(replay)[-1]["outcome"]["type"] == "interrupt"
    tail = await api.send("GET", "/threads/{threadId}/runs/{runId}/events", path_parameters=run,
                          headers={"Accept": "text/event-stream", "Last-Event-ID": "3"})
    assert [e["type"] for e in events_of(tail)] == [e["type"] for e in events_of(replay)][3:]
    assert (await api.send("GET", "/threads/{threadId}/runs/{runId}/events", path_parameters=run,
                           query="?after=3")).content == tail.content
    bad_cursor = await api.send("GET", "/threads/{threadId}/runs/{runId}/events", path_parameters=run,
                                headers={"Last-Event-ID": "x"})
    assert error_code(bad_cursor) == "INVALID_INPUT"
    no_run = await api.send("GET", "/threads/{threadId}/runs/{runId}/events",
                            path_parameters={"threadId": "oa-perm", "runId": "run-never"})
    assert error_code(no_run) == "RUN_NOT_FOUND"
    assert (await api.send("GET", "/capabilities")).json()["transport"]["resumable"] is True

    # A question answered with "cancelled" cancels the execution.
    events = events_of(await api.run(run_body(thread_id="oa-q", text="question", cwd=cwd)))
    (question,) = events[-1]["outcome"]["interrupts"]
    assert question["reason"] == "input_required"
    cancelled = events_of(await api.run(resume_body("oa-q", workspace, [{"interruptId": question["id"],
                                                                           "status": "cancelled"}])))
    assert cancelled[-1] == {"type": "RUN_FINISHED", "threadId": "oa-q", "runId": cancelled[0]["runId"],
                             "outcome": {"type": "cancelled"}}

    # Every demo behaviour's stream (reasoning, tool progress, artifacts, failures).
    for text, last in [("think", "RUN_FINISHED"), ("tool", "RUN_FINISHED"), ("fail", "RUN_ERROR"),
                       ("rpcerror", "RUN_ERROR")]:
        events = events_of(await api.run(run_body(thread_id=f"oa-{text}", text=text, cwd=cwd)))
        assert events[-1]["type"] == last

    # The cancel route on an interrupted execution.
    events = events_of(await api.run(run_body(thread_id="oa-c", text="permission b.txt", cwd=cwd)))
    session = next(e["value"] for e in events if e.get("name") == "iac-code.session.v1")
    execution_id = session["executionId"]
    ids = {"threadId": "oa-c", "rosInvocationId": session["rosInvocationId"]}
    waiting = (await api.send("GET", "/threads/{threadId}", path_parameters={"threadId": "oa-c"})).json()
    assert waiting["state"] == "interrupted" and waiting["pendingInterrupts"] == events[-1]["outcome"]["interrupts"]
    assert error_code(await api.cancel(execution_id, {**ids, "rosInvocationId": "other"})) == "EXECUTION_NOT_FOUND"
    assert error_code(await api.cancel(execution_id, {**ids, "threadId": 1})) == "INVALID_INPUT"
    cancelled = await api.cancel(execution_id, {**ids, "reason": "a member the route ignores"})
    assert cancelled.json() == {"executionId": execution_id, "status": "cancelled"}
    assert (await api.cancel(execution_id, ids)).json()["status"] == "already_terminal"
    ended = (await api.send("GET", "/threads/{threadId}", path_parameters={"threadId": "oa-c"})).json()
    assert ended["state"] == "terminal" and ended["lastError"] == {"code": "CANCELLED"}
    assert error_code(await api.cancel("exec-unknown", ids)) == "EXECUTION_NOT_FOUND"

    # The cancel route on an active run, and THREAD_BUSY meanwhile.
    slow = asyncio.ensure_future(api.run(run_body(thread_id="oa-slow", text="slow 5", cwd=cwd)))
    execution_id = await _active_execution(adapter, "oa-slow")
    assert error_code(await api.run(run_body(thread_id="oa-slow", text="hi", cwd=cwd))) == "THREAD_BUSY"
    ids = {"threadId": "oa-slow", "rosInvocationId": "invocation-1"}
    assert (await api.cancel(execution_id, ids)).json()["status"] == "cancelled"
    assert events_of(await slow)[-1]["outcome"] == {"type": "cancelled"}

    # Requests refused before anything is read.
    plain = await api.send("POST", "/", data=b"{}", headers={"Content-Type": "text/plain"})
    assert error_code(plain) == "UNSUPPORTED_MEDIA_TYPE"
    garbage = await api.send("POST", "/", data=b"{not json", headers={"Content-Type": "application/json"})
    assert error_code(garbage) == "INVALID_JSON"
    huge = await api.send("POST", "/", data=b" " * (adapter.config.max_body_bytes + 1),
                          headers={"Content-Type": "application/json"})
    assert error_code(huge) == "REQUEST_TOO_LARGE"
    big = await api.send("POST", CANCEL_PATH, execution_id="x", data=b" " * (adapter.config.max_cancel_body_bytes + 1),
                         headers={"Content-Type": "application/json"})
    assert error_code(big) == "REQUEST_TOO_LARGE"
    routed = await api.send("POST", CANCEL_PATH, execution_id="%7B", json_body=ids)
    assert routed.status_code == 404


async def test_a_pipeline_run_conforms(adapter: RunningAdapter, workspace: Path) -> None:
    api = Conformance(adapter.url)
    body = run_body(thread_id="oa-pipe", text="build it", cwd=str(workspace), runMode="pipeline")
    seen: set[str] = set()
    events = events_of(await api.run(body))
    for _ in range(4):  # a side-band permission, then the candidate selection
        seen.update(e["type"] if e["type"] != "CUSTOM" else e["name"] for e in events)
        if events[-1]["type"] != "RUN_FINISHED" or events[-1]["outcome"]["type"] != "interrupt":
            break
        answers = []
        for interrupt in events[-1]["outcome"]["interrupts"]:
            options = interrupt["metadata"].get("options") or []
            payload = {"decision": "allow_once"} if interrupt["metadata"]["kind"] == "permission" else {
                "selectedId": options[-1]["id"]}
            answers.append({"interruptId": interrupt["id"], "status": "resolved", "payload": payload})
        resume = {**resume_body("oa-pipe", workspace, answers)}
        resume["forwardedProps"]["iacCode"]["runMode"] = "pipeline"
        events = events_of(await api.run(resume))
    assert events[-1]["outcome"] == {"type": "success"}
    assert {"STEP_STARTED", "STEP_FINISHED", "ACTIVITY_SNAPSHOT", "iac-code.pipeline.v1"} <= seen


async def _active_execution(adapter: RunningAdapter, thread_id: str) -> str:
    """The execution id of the thread's active run, once it streams."""
    def active_execution() -> str | None:
        service = adapter.app[SERVICE]
        return next((eid for eid, driver in service.active.items() if driver.identity.thread_id == thread_id), None)

    return await eventually(active_execution, f"a run of {thread_id} streams")


async def test_a_token_protected_server_answers_401_as_documented(token_adapter: RunningAdapter, tmp_path: Path) -> None:
    api = Conformance(token_adapter.url)
    body = run_body(thread_id="oa-auth", text="hello", cwd=str(tmp_path / "workspaces"))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        assert error_code(await api.run(body, headers=headers)) == "UNAUTHORIZED"
        cancel = await api.cancel("exec-x", {"threadId": "t", "rosInvocationId": "i"}, headers=headers)
        assert error_code(cancel) == "UNAUTHORIZED"
    # Auth is checked before the media type; GET routes stay open.
    plain = await api.send("POST", "/", data=b"x", headers={"Content-Type": "text/plain"})
    assert error_code(plain) == "UNAUTHORIZED"
    assert (await api.send("GET", "/health")).status_code == 200
    assert "aguiadapter_active_runs" in (await api.send("GET", "/metrics")).text


async def test_schemathesis_finds_nothing_undocumented(token_adapter: RunningAdapter, tmp_path: Path) -> None:
    workspace = tmp_path / "workspaces" / "fuzz"
    workspace.mkdir(parents=True)
    failures, statuses = await asyncio.to_thread(_fuzz, token_adapter.url.rstrip("/"), str(workspace))
    assert statuses.get(("POST /", 200), 0) > 0, statuses  # some runs really streamed (the documented turns)
    assert failures == [], "\n\n".join(failures)


def _fuzz(base_url: str, workspace: str) -> tuple[list[str], dict[tuple[str, int], int]]:
    """Positive and negative examples for every operation; returns failures and status counts."""
    schema = load_schema()
    checks = [*RESPONSE_CHECKS, st_checks.negative_data_rejection]
    session = requests.Session()
    failures: list[str] = []
    statuses: dict[tuple[str, int], int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path == "/openapi.json":
            continue  # no inputs; compared as a whole by test_the_served_document_is_the_packaged_one
        _send_documented_examples(operation, base_url, workspace, session, failures, statuses)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for authorized in (True, False):
                examples = FUZZ_EXAMPLES if authorized else max(FUZZ_EXAMPLES // 6, 5)
                test = _fuzz_one(operation, mode, authorized, base_url, workspace, session, checks, failures,
                                 statuses)
                _run_bounded(settings(
                    max_examples=examples,
                    deadline=None,
                    database=None,
                    derandomize=True,
                    suppress_health_check=list(HealthCheck),
                    phases=[Phase.generate],
                )(test))
    return failures, statuses


def _send_documented_examples(operation: Any, base_url: str, workspace: str, session: requests.Session,
                              failures: list[str], statuses: dict[tuple[str, int], int]) -> None:
    """The operation's documented request examples, with a token and checked like generated cases.

    Generation alone cannot be counted on to produce a run that streams:
    Hypothesis also draws string constants it finds in the code under test,
    so what it generates changes with any literal added to the package.
    """
    spec = load_spec()["paths"][operation.path][operation.method.lower()]
    examples = spec.get("requestBody", {}).get("content", {}).get("application/json", {}).get("examples", {})
    for name, example in examples.items():
        body = json.loads(json.dumps(example["value"]))
        iac = body.get("forwardedProps", {}).get("iacCode")
        if isinstance(iac, dict):
            iac["cwd"] = workspace
        case = operation.Case(body=body, media_type="application/json")
        response = case.call(base_url=base_url, session=session, headers={"Authorization": f"Bearer {TOKEN}"},
                             timeout=30)
        key = (operation.label, response.status_code)
        statuses[key] = statuses.get(key, 0) + 1
        try:
            case.validate_response(response, checks=RESPONSE_CHECKS)
        except (FailureGroup, Failure) as exc:
            failures.append(f"{operation.label} (documented example {name}):\n{failure_text(exc)}")


def _fuzz_one(operation: Any, mode: GenerationMode, authorized: bool, base_url: str, workspace: str,
              session: requests.Session, checks: list[Any], failures: list[str],
              statuses: dict[tuple[str, int], int]) -> Callable[..., None]:
    @given(case=operation.as_strategy(generation_mode=mode))
    def test(case: Any) -> None:
        if mode is GenerationMode.POSITIVE and isinstance(case.body, dict):
            # Keep valid runs inside the allowed workspace root, so that they really stream.
            iac = case.body.get("forwardedProps", {}).get("iacCode") if isinstance(
                case.body.get("forwardedProps"), dict) else None
            if isinstance(iac, dict):
                iac["cwd"] = workspace
        headers = {"Authorization": f"Bearer {TOKEN}"} if authorized else {}
        if not authorized and "Authorization" in (case.headers or {}):
            case.headers.pop("Authorization")
        response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
        key = (operation.label, response.status_code)
        statuses[key] = statuses.get(key, 0) + 1
        if not authorized and operation.method.upper() == "POST" and response.status_code != 401:
            failures.append(f"{operation.label} without a token answered {response.status_code}")
        try:
            case.validate_response(response, checks=checks)
        except (FailureGroup, Failure) as exc:
            failures.append(f"{operation.label} ({mode.value}):\n{failure_text(exc)}")

    return test


def _run_bounded(test: Callable[[], None]) -> None:
    """Run a hypothesis test; an operation without inputs cannot have negative data."""
    from hypothesis.errors import Unsatisfiable

    try:
        test()
    except Unsatisfiable:
        pass


async def test_the_served_document_is_the_packaged_one(adapter: RunningAdapter) -> None:
    """GET /openapi.json serves the packaged file, open, as application/json.

    Fails until the route exists in aguiadapter/web/app.py.
    """
    async with aiohttp.ClientSession() as session, session.get(adapter.url + "openapi.json") as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "application/json"
        served = await response.json()
    assert served == load_spec()


@pytest.mark.parametrize("path", ["", CANCEL_PATH.replace("{executionId}", "x").lstrip("/")])
async def test_a_lone_surrogate_is_refused_as_documented(adapter: RunningAdapter, workspace: Path, path: str) -> None:
    if path:
        body = json.dumps({"threadId": "t-MARK", "rosInvocationId": "i"})
    else:
        body = json.dumps(run_body(thread_id="oa-surrogate", text="MARK", cwd=str(workspace)))
    data = body.replace("MARK", "hi \\ud800").encode()
    async with aiohttp.ClientSession() as session, session.post(
        adapter.url + path, data=data, headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 400, await response.text()
        assert (await response.json())["error"]["code"] == "INVALID_JSON"


async def test_a_surrogate_pair_is_fine(adapter: RunningAdapter, workspace: Path) -> None:
    body = json.dumps(run_body(thread_id="oa-emoji", text="MARK", cwd=str(workspace)))
    data = body.replace("MARK", "hi \\ud83d\\ude00").encode()
    async with aiohttp.ClientSession() as session, session.post(
        adapter.url, data=data, headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 200
        assert "\U0001f600" in (await response.read()).decode()


@pytest.mark.parametrize("path", ["", CANCEL_PATH.replace("{executionId}", "x").lstrip("/")])
async def test_deeply_nested_json_is_refused_as_documented(adapter: RunningAdapter, path: str) -> None:
    data = b"[" * 5000 + b"]" * 5000
    async with aiohttp.ClientSession() as session, session.post(
        adapter.url + path, data=data, headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 400, await response.text()
