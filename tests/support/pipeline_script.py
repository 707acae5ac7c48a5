"""The recorded model script that drives iac-code's ``selling`` pipeline offline.

``tests/fixtures/a2a-pipeline/selling-model-script.json`` holds the model
replies of three scenarios (``full``, ``direct``, ``rich``) that take the real
``iac-code a2a`` to ``pipeline_completed``. Two things live here:

* ``ScriptPlayer``: what the model stub answers to one chat-completions
  request while a scenario is active (see ``ModelStub.use_pipeline_script``).
* ``PipelineScenario``: what a client needs to run the same scenario: the
  prompt, the request options, the pauses it will meet in order and the
  answer the recorded client gave to each, as A2A text or as an AG-UI resume
  payload.

How a reply is picked (the rules of the script's ``_comment``):

1. Each step's agent loop has a system prompt whose heading is
   ``# 步骤：<name>``; that name selects the step's replies. A request without
   a heading, or with a step the scenario does not script, gets ``fallback``.
2. A step's replies are indexed by the number of assistant turns already in
   the request. A step may hold ``cases``: the first whose ``last_user_matches``
   regex finds the newest user message wins (a candidate selection comes back
   as a new user message: iac-code starts the step's conversation again with
   it), indexed the same way.
3. Past the end of a list: the last reply without a tool call again, else
   ``exhausted``.
4. ``{{key}}`` is filled from the ``extract`` regexes run on the system prompt;
   ``{{candidate_slot}}`` is the ``n`` of ``templates/<n>-...``.
5. ``base`` inherits another scenario (its steps merged by name, later wins).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.chat import message_text

SCRIPT_PATH = Path(__file__).resolve().parent.parent / "fixtures" / "a2a-pipeline" / "selling-model-script.json"
PIPELINE_NAME = "selling"
SCENARIOS = ("full", "direct", "rich")

#: The deploy step's bash command appends this line to this file in the cwd:
#: the count of lines is the number of times the permitted command really ran.
DEPLOY_MARKER_FILE = "deploy-marker.txt"
DEPLOY_MARKER_LINE = "pipeline-deploy-marker"

#: The deploy step's name (its system prompt's heading): the step that asks
#: permission for the deploy command.
DEPLOY_STEP = "部署"

#: iac-code 0.16.0 honours only this value of ``candidatePresentation``.
RUNTIME_RICH_PRESENTATION = "rich-v1"

_STEP_HEADING = re.compile(r"^# 步骤：(?P<name>.+?)\s*$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{\{(?P<key>\w+)\}\}")
_CANDIDATE_SLOT = re.compile(r"templates/(?P<n>\d+)-")


def load_script(path: Path = SCRIPT_PATH) -> dict[str, Any]:
    """The model script as recorded (a fresh copy on every call)."""
    return dict(json.loads(path.read_text(encoding="utf-8")))


def resolve_scenario(script: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A scenario with its ``base`` chain applied: top-level keys of the later
    scenario win, ``steps`` are merged by step name."""
    own = script["scenarios"][name]
    base_name = own.get("base")
    resolved = resolve_scenario(script, base_name) if base_name else {"steps": {}}
    steps = {**resolved["steps"], **copy.deepcopy(own.get("steps", {}))}
    resolved.update(copy.deepcopy({k: v for k, v in own.items() if k != "base"}))
    resolved["steps"] = steps
    return resolved


# ---------------------------------------------------------------- the player


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ScriptedReply:
    """One model turn: optional reasoning, text in ``chunks`` deltas, an optional tool call.

    ``label`` says where it came from (``"<step>[<i>]"``, ``"<step>/case<n>[<i>]"``,
    a ``+repeat`` suffix past the end of a list, ``"fallback"``, ``"exhausted:<step>"``).
    """

    label: str
    text: str = ""
    chunks: int = 1
    reasoning: str = ""
    tool_call: ToolCall | None = None


class ScriptPlayer:
    """Answers chat-completions requests for one scenario of the script. Pure:
    the reply depends only on the request's messages."""

    def __init__(
        self, script: Mapping[str, Any], scenario: str, stall_after_tool: Mapping[str, float] | None = None
    ) -> None:
        self.scenario = scenario
        #: Seconds a step's reply to a tool result waits, by step name: the
        #: runtime is caught with the step's tool run and the step unfinished.
        self.stall_after_tool = dict(stall_after_tool or {})
        self._resolved = resolve_scenario(script, scenario)
        self._extract = {key: re.compile(rx) for key, rx in script.get("extract", {}).items()}
        self._fallback = dict(script["fallback"])
        self._exhausted = dict(script["exhausted"])

    @property
    def steps(self) -> dict[str, Any]:
        return dict(self._resolved["steps"])

    def stall(self, messages: Sequence[Mapping[str, Any]]) -> float:
        """How long to wait before answering (``stall_after_tool``)."""
        if not messages or messages[-1].get("role") != "tool":
            return 0.0
        return self.stall_after_tool.get(_step_of(messages) or "", 0.0)

    def reply(self, messages: Sequence[Mapping[str, Any]]) -> ScriptedReply:
        system = "\n".join(message_text(m) for m in messages if m.get("role") == "system")
        step = _step_of(messages)
        if step is None or step not in self._resolved["steps"]:
            return _reply("fallback", self._fallback, {})
        replies, label, turns = self._replies_for(step, messages)
        values = self._values(system)
        if turns < len(replies):
            return _reply(f"{label}[{turns}]", replies[turns], values)
        plain = [r for r in replies if "tool_call" not in r]
        if plain:
            return _reply(f"{label}[{turns}]+repeat", plain[-1], values)
        return _reply(f"exhausted:{step}", self._exhausted, {})

    def _replies_for(
        self, step: str, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[list[dict[str, Any]], str, int]:
        """The reply list that applies, its label and the index into it."""
        entry = self._resolved["steps"][step]
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        if isinstance(entry, list):
            return entry, step, turns
        newest = next((message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
        for number, case in enumerate(entry.get("cases", [])):
            if re.search(case["last_user_matches"], newest):
                return case["replies"], f"{step}/case{number}", turns
        return entry["replies"], step, turns

    def _values(self, system: str) -> dict[str, str]:
        values = {key: m[1] for key, rx in self._extract.items() if (m := rx.search(system))}
        slot = _CANDIDATE_SLOT.search(values.get("output_path") or values.get("file_path") or "")
        if slot:
            values["candidate_slot"] = slot["n"]
        return values


def _step_of(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The step whose agent loop sent the request (its system prompt's heading)."""
    system = "\n".join(message_text(m) for m in messages if m.get("role") == "system")
    heading = _STEP_HEADING.search(system)
    return heading["name"] if heading else None


def _reply(label: str, raw: Mapping[str, Any], values: Mapping[str, str]) -> ScriptedReply:
    call = raw.get("tool_call")
    tool_call = ToolCall(call["name"], _fill(call.get("arguments", {}), values)) if call else None
    return ScriptedReply(
        label=label,
        text=_fill(raw.get("text", ""), values),
        chunks=int(raw.get("chunks", 1)),
        reasoning=_fill(raw.get("reasoning", ""), values),
        tool_call=tool_call,
    )


def _fill(value: Any, values: Mapping[str, str]) -> Any:
    """``{{key}}`` replaced in every string inside ``value``; unknown keys stay."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: values.get(m["key"], m[0]), value)
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    return value


# ---------------------------------------------------------------- the client side


@dataclass(frozen=True)
class Pause:
    """One pause of a scenario, in the order the pipeline reaches it.

    ``kind`` and ``scope`` are those of the runtime's ``input`` envelope (a
    question and a selection carry no scope). ``count`` inputs of this pause
    wait at once (the two parallel candidates each ask to write their
    template). ``answer_call`` is how the recorded client answered it on A2A.
    """

    name: str
    kind: str
    scope: str | None
    #: How the runtime announces it on A2A (what iac-code 0.16.0 sends).
    announced: str
    #: How the recorded client answered it on A2A, and what came back.
    answered: str
    tool_name: str | None = None
    count: int = 1
    targets: tuple[str, ...] = ()

    def matches(self, envelope: Mapping[str, Any]) -> bool:
        """Whether an ``input`` envelope (or an interrupt's metadata with the
        same keys) is one of this pause's inputs."""
        if envelope.get("kind") != self.kind or envelope.get("scope") != self.scope:
            return False
        return self.tool_name is None or envelope.get("toolName") == self.tool_name


QUESTION = Pause(
    "question",
    "ask_user_question",
    None,
    announced="INPUT_REQUIRED status whose input envelope has kind ask_user_question, inputId 'ask-<toolUseId>', "
    "options [{id: 'env-test', label: '测试环境'}, {id: 'env-prod', label: '生产环境'}], allowFreeText; the stream closes",
    answered="SendStreamingMessage to the task: one text part, the option label; the stream goes on with the pipeline",
)
CANDIDATE_PERMISSIONS = Pause(
    "candidate permissions",
    "permission",
    "candidate_step",
    announced="WORKING status updates (pipeline permission_requested, scope candidate_step) whose input envelope has "
    "scope candidate_step and subPipelineId; the task stays WORKING and the stream stays open; GetTask lists both "
    "in metadata.iac_code.pendingPermissions[] with neither scope nor subPipelineId",
    answered="SendMessage to the task per input: one permission data part; the result is a message whose data part "
    "is {kind: permission_ack, accepted: true, inputId, toolUseId, decision}; then GetTask and SubscribeToTask",
    tool_name="write_file",
    count=2,
    targets=("templates/1-single-ecs.yml", "templates/2-ecs-with-slb.yml"),
)
SELECTION = Pause(
    "candidate selection",
    "candidate_selection",
    None,
    announced="pipeline step_completed confirm_and_select, then INPUT_REQUIRED status whose input envelope has kind "
    "candidate_selection, inputId 'input-<pipeline eventId>', options [{id: '0', label: 'single-ecs'}, "
    "{id: '1', label: 'ecs-with-slb'}]; the stream closes",
    answered="SendStreamingMessage to the task: one text part, the option label; confirm_and_select goes on "
    "(no new step_started) and completes again",
)
STEP_PERMISSION = Pause(
    "deploy permission",
    "permission",
    "step",
    announced="INPUT_REQUIRED status (pipeline permission_requested) whose input envelope has scope step, toolName "
    "bash, effect local_execution; then one more INPUT_REQUIRED status without input (pipeline backup_committed); "
    "the stream closes; GetTask then shows no input, the pipeline state route lists it in display.permissions[] "
    "(id 'perm-<toolUseId>', the envelope's inputId, pending: true)",
    answered="SendStreamingMessage to the task: one permission data part; the first update carries inputReceived "
    "with the inputId, then pipeline permission_resolved ... pipeline_completed (COMPLETED)",
    tool_name="bash",
)

_PAUSES = {
    "full": (QUESTION, CANDIDATE_PERMISSIONS, SELECTION, STEP_PERMISSION),
    "direct": (SELECTION, STEP_PERMISSION),
    "rich": (SELECTION, STEP_PERMISSION),
}


@dataclass(frozen=True)
class PipelineScenario:
    """What a client needs to run one scenario of the script to ``pipeline_completed``."""

    name: str
    description: str
    prompt: str
    answers: dict[str, list[str]]
    pauses: tuple[Pause, ...]
    #: ``forwardedProps.iacCode.candidatePresentation`` as the scenario asks it (AG-UI side).
    candidate_presentation: str | None = None
    #: The value iac-code understands for it (what must reach ``metadata.iac_code``).
    runtime_candidate_presentation: str | None = None
    script: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def decision(self) -> str:
        """The decision given to every permission."""
        return self.answers["permission"][0]

    def a2a_options(self, cwd: Path | str) -> dict[str, Any]:
        """``message.metadata.iac_code`` of the user message and of every answer."""
        options: dict[str, Any] = {"cwd": str(cwd), "run_mode": "pipeline", "pipeline_name": PIPELINE_NAME}
        if self.runtime_candidate_presentation:
            options["candidatePresentation"] = self.runtime_candidate_presentation
        return options

    def agui_options(self) -> dict[str, Any]:
        """What to add to ``forwardedProps.iacCode`` of the first AG-UI run."""
        options: dict[str, Any] = {"runMode": "pipeline", "pipelineName": PIPELINE_NAME}
        if self.candidate_presentation:
            options["candidatePresentation"] = self.candidate_presentation
        return options

    def pause_for(self, envelope: Mapping[str, Any]) -> Pause:
        """The pause an envelope (or an interrupt's metadata) belongs to."""
        for pause in self.pauses:
            if pause.matches(envelope):
                return pause
        raise AssertionError(f"scenario {self.name!r} has no pause like {dict(envelope)!r}")

    def choose(self, options: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any]:
        """The option the recorded client picked for a question or a selection:
        the first answer equal to an option's id or label, else contained in a label."""
        for answer in self.answers[kind]:
            for option in options:
                if answer in (option.get("id"), option.get("label")):
                    return option
        for answer in self.answers[kind]:
            for option in options:
                if answer in str(option.get("label", "")):
                    return option
        raise AssertionError(f"no option of {list(options)!r} matches the answers {self.answers[kind]!r}")

    def text_answer(self, envelope: Mapping[str, Any]) -> str:
        """The A2A answer to a question or selection envelope: the chosen option's label."""
        return str(self.choose(envelope["options"], envelope["kind"])["label"])

    def resume_payload(self, kind: str, options: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """The AG-UI resume payload for an interrupt of this kind."""
        if kind == "permission":
            return {"decision": self.decision}
        return {"selectedId": self.choose(options, kind)["id"]}

    def resume(self, interrupts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The AG-UI ``resume[]`` answering every interrupt of a ``RUN_FINISHED``
        outcome the way the recorded client did (kind and options from ``metadata``)."""
        answers = []
        for interrupt in interrupts:
            metadata = interrupt["metadata"]
            self.pause_for(metadata)  # fails on an interrupt the scenario does not expect
            payload = self.resume_payload(metadata["kind"], metadata.get("options", ()))
            answers.append({"interruptId": interrupt["id"], "status": "resolved", "payload": payload})
        return answers

    def player(self) -> ScriptPlayer:
        return ScriptPlayer(self.script, self.name)


def scenario(name: str, script: Mapping[str, Any] | None = None) -> PipelineScenario:
    """One scenario of the script (``full``, ``direct`` or ``rich``)."""
    raw = dict(script) if script is not None else load_script()
    resolved = resolve_scenario(raw, name)
    presentation = resolved.get("forwardedProps", {}).get("candidatePresentation")
    runtime_values = resolved.get("runtimeCandidatePresentation") or []
    return PipelineScenario(
        name=name,
        description=resolved["description"],
        prompt=resolved["prompt"],
        answers={kind: list(values) for kind, values in resolved["answers"].items()},
        pauses=_PAUSES[name],
        candidate_presentation=presentation,
        runtime_candidate_presentation=runtime_values[0] if runtime_values else None,
        script=raw,
    )


def deploy_count(cwd: Path) -> int:
    """How many times the deploy step's command ran in this workspace."""
    marker = cwd / DEPLOY_MARKER_FILE
    if not marker.exists():
        return 0
    return sum(1 for line in marker.read_text().splitlines() if line == DEPLOY_MARKER_LINE)
