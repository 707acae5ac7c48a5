// The example page: one AG-UI thread with @ag-ui/client's HttpAgent.
//
// Text streams into the page as TEXT_MESSAGE_CONTENT arrives; an interrupt
// (RUN_FINISHED with outcome "interrupt") becomes a card with buttons, and a
// button answers it through the client's own resume support: the agent keeps
// the interrupts in agent.pendingInterrupts, buildResumeArray() answers every
// one of them, and runAgent({runId, forwardedProps, resume}) sends the answer.
//
// The agent is AdapterHttpAgent of @aguiadapter/client (clients/js in this
// repository): HttpAgent with two things that survive here what usually ends
// a chat. A stream that stops before its RUN_FINISHED or RUN_ERROR (a dropped
// connection, a replica that shuts down in a rolling deploy) re-attaches to
// the run with the id of the last event it got, on any replica, until the
// run's end; and a reload (the thread id is kept in the page's URL,
// ?thread=...) connects: POST /connect gives back the conversation as a
// MESSAGES_SNAPSHOT, the pending interrupts as the outcome of its
// RUN_FINISHED, and a run still going, live.
import { buildResumeArray } from "@ag-ui/client";
import { AdapterHttpAgent } from "@aguiadapter/client";

const $ = (selector) => document.querySelector(selector);
const log = $("[data-testid=log]");
const form = $("[data-testid=composer]");
const prompt = $("[data-testid=prompt]");
const send = $("[data-testid=send]");
const status = $("[data-testid=status]");

const config = await (await fetch("/config.json")).json();
// The thread this page talks on: in its URL once a run was sent on it, so a
// reload (or the same address in another tab) finds it again.
const savedThread = new URL(location.href).searchParams.get("thread");
const agent = new AdapterHttpAgent({
  url: config.aguiUrl,
  threadId: savedThread ?? `browser-${crypto.randomUUID()}`,
  reattach: {
    onReattach: ({ attempt }) => {
      if (attempt === 1) add("note", "Connection lost: picking the answer up where it broke off…");
      setStatus("reconnecting", "Reconnecting…");
    },
    onReattached: () => setStatus("running", "The agent is working…"),
  },
});
// One rosInvocationId per user turn; the resume of that turn's interrupts reuses it.
let invocation = crypto.randomUUID();

const forwardedProps = () => ({
  iacCode: { schemaVersion: 1, rosInvocationId: invocation, cwd: config.cwd },
});

function setStatus(state, text) {
  status.dataset.state = state;
  status.textContent = text;
  const idle = state === "ready";
  prompt.disabled = !idle;
  send.disabled = !idle;
  if (idle) prompt.focus();
}

function add(role, text = "", attrs = {}) {
  const item = document.createElement("li");
  item.dataset.role = role;
  for (const [key, value] of Object.entries(attrs)) item.dataset[key] = value;
  item.textContent = text;
  log.append(item);
  item.scrollIntoView({ block: "end" });
  return item;
}

const bubbles = new Map(); // messageId -> <li> of a streaming text or reasoning message
const toolCalls = new Map(); // toolCallId -> <li> of the call (kept across runs: a result may come after a resume)

const view = {
  onTextMessageStartEvent({ event }) {
    bubbles.set(event.messageId, add("assistant", "", { messageId: event.messageId }));
  },
  onTextMessageContentEvent({ event }) {
    const bubble = bubbles.get(event.messageId) ?? add("assistant");
    bubble.textContent += event.delta;
    bubble.scrollIntoView({ block: "end" });
  },
  onReasoningMessageStartEvent({ event }) {
    bubbles.set(event.messageId, add("reasoning", "", { messageId: event.messageId }));
  },
  onReasoningMessageContentEvent({ event }) {
    const bubble = bubbles.get(event.messageId) ?? add("reasoning");
    bubble.textContent += event.delta;
  },
  onToolCallStartEvent({ event }) {
    if (!toolCalls.has(event.toolCallId)) {
      toolCalls.set(event.toolCallId, add("tool-call", `${event.toolCallName}(…)`, { toolCallId: event.toolCallId }));
    }
  },
  onToolCallEndEvent({ event, toolCallName, toolCallArgs }) {
    const line = toolCalls.get(event.toolCallId);
    if (line) line.textContent = `${toolCallName}(${JSON.stringify(toolCallArgs)})`;
  },
  onToolCallResultEvent({ event }) {
    // In order of arrival: after a resume the result comes below the card that approved it.
    const name = toolCalls.get(event.toolCallId)?.textContent.split("(")[0] ?? "tool";
    add("tool-result", `${name} → ${event.content}`, { toolCallId: event.toolCallId });
  },
  // A connect's first word: the conversation so far, drawn anew.
  onMessagesSnapshotEvent({ event }) {
    showConversation(event.messages);
  },
  onCustomEvent({ event }) {
    if (event.name === HISTORY_EVENT && event.value?.status === "unavailable") {
      // The adapter's sentence, in the page's language; what waits for an answer still follows.
      add("note", event.value.message ?? "The earlier conversation cannot be loaded right now.");
    }
  },
  onRunFinishedEvent(params) {
    if (params.outcome === "interrupt") {
      for (const interrupt of params.interrupts) showInterrupt(interrupt);
    }
  },
  onRunErrorEvent({ event }) {
    add("error", `${event.code ?? "RUN_ERROR"}: ${event.message}`);
    // @ag-ui/client 1.0 clears pendingInterrupts only on RUN_FINISHED; after a
    // RUN_ERROR (a cancelled question, say) nothing is pending on the server.
    agent.pendingInterrupts = [];
  },
};

// The adapter's CUSTOM event in a connect when the runtime could not give the conversation back.
const HISTORY_EVENT = "iac-code.history.v1";

function showConversation(messages) {
  log.replaceChildren();
  bubbles.clear();
  toolCalls.clear();
  const names = new Map(); // toolCallId -> tool name
  for (const message of messages) {
    if (message.role === "user") {
      const text = typeof message.content === "string"
        ? message.content
        : message.content.filter((part) => part.type === "text").map((part) => part.text).join("\n");
      add("user", text, { messageId: message.id });
    } else if (message.role === "reasoning") {
      add("reasoning", message.content, { messageId: message.id });
    } else if (message.role === "assistant") {
      if (message.content) add("assistant", message.content, { messageId: message.id });
      for (const call of message.toolCalls ?? []) {
        names.set(call.id, call.function.name);
        const args = call.function.arguments ? JSON.stringify(JSON.parse(call.function.arguments)) : "{}";
        toolCalls.set(call.id, add("tool-call", `${call.function.name}(${args})`, { toolCallId: call.id }));
      }
    } else if (message.role === "tool") {
      add("tool-result", `${names.get(message.toolCallId) ?? "tool"} → ${message.content}`, { toolCallId: message.toolCallId });
    }
  }
}

// Answers picked on the cards, by interrupt id, until every pending one has its answer.
const answers = {};

function showInterrupt(interrupt) {
  const card = add("interrupt", "", { interruptId: interrupt.id });
  card.setAttribute("data-testid", "interrupt");
  const meta = interrupt.metadata ?? {};
  const title = document.createElement("div");
  title.className = "interrupt-title";
  title.textContent = interrupt.message ?? meta.title ?? "The agent needs your input";
  const summary = document.createElement("div");
  summary.className = "interrupt-summary";
  summary.textContent = [meta.purpose, meta.safeSummary].filter(Boolean).join(" · ");
  const actions = document.createElement("div");
  actions.className = "interrupt-actions";
  card.append(title, summary, actions);

  const choices = [];
  const decisions = interrupt.responseSchema?.properties?.decision?.enum ?? [];
  if (decisions.includes("allow_once")) {
    choices.push(["Approve", "primary", { status: "resolved", payload: { decision: "allow_once" } }]);
  }
  if (decisions.includes("deny")) {
    choices.push(["Deny", "danger", { status: "resolved", payload: { decision: "deny" } }]);
  }
  if (!decisions.length) {
    // A question: one button per option (a permission lists its decisions as options too).
    for (const option of meta.options ?? []) {
      choices.push([option.label, "", { status: "resolved", payload: { selectedId: option.id } }]);
    }
    choices.push(["Cancel", "danger", { status: "cancelled" }]);
  }

  for (const [label, style, answer] of choices) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = label;
    if (style) button.className = style;
    button.addEventListener("click", () => {
      for (const b of actions.querySelectorAll("button")) b.disabled = true;
      const picked = document.createElement("div");
      picked.className = "interrupt-answer";
      picked.textContent = `You chose: ${label}`;
      card.append(picked);
      answers[interrupt.id] = answer;
      if (agent.pendingInterrupts.every((pending) => pending.id in answers)) void resume();
    });
    actions.append(button);
  }
}

function rememberThread() {
  const url = new URL(location.href);
  if (url.searchParams.get("thread") === agent.threadId) return;
  url.searchParams.set("thread", agent.threadId);
  history.replaceState(null, "", url);
}

async function run(parameters) {
  rememberThread();
  setStatus("running", "The agent is working…");
  try {
    await agent.runAgent({ runId: crypto.randomUUID(), forwardedProps: forwardedProps(), ...parameters }, view);
  } catch (error) {
    const detail = error?.payload?.error;
    add("error", detail ? `${detail.code}: ${detail.message}` : String(error?.message ?? error));
  }
  if (agent.pendingInterrupts.length) {
    setStatus("waiting", "Waiting for your answer");
  } else {
    setStatus("ready", "Ready");
  }
}

async function resume() {
  const resumeEntries = buildResumeArray(agent.pendingInterrupts, answers);
  for (const id of Object.keys(answers)) delete answers[id];
  await run({ resume: resumeEntries });
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = prompt.value.trim();
  if (!text || agent.isRunning || agent.pendingInterrupts.length) return;
  prompt.value = "";
  invocation = crypto.randomUUID();
  const message = { id: crypto.randomUUID(), role: "user", content: text };
  agent.addMessage(message);
  add("user", text, { messageId: message.id });
  await run({});
});

// A reloaded page: connect. The snapshot redraws the conversation, the
// RUN_FINISHED of the restoring run shows the cards of what waits for an
// answer (and sets agent.pendingInterrupts), and a run still going streams on
// through the same view until it ends.
async function pickUp() {
  setStatus("loading", "Loading the conversation…");
  const restoring = crypto.randomUUID();
  const connectView = {
    ...view,
    onRunStartedEvent({ event }) {
      if (event.runId !== restoring) setStatus("running", "The agent is still working on this thread…");
    },
  };
  try {
    await agent.connectAgent({ runId: restoring, forwardedProps: forwardedProps() }, connectView);
  } catch (error) {
    add("error", `The conversation could not be loaded: ${error?.message ?? error}`);
  }
  if (agent.connectStatus === 404) add("note", "This thread is not known here any more: a new conversation starts.");
  if (!agent.pendingInterrupts.length) return;
  // The resume must carry the rosInvocationId of the turn it answers.
  const response = await fetch(`${config.aguiUrl}threads/${encodeURIComponent(agent.threadId)}`);
  if (response.ok) invocation = (await response.json()).rosInvocationId ?? invocation;
  setStatus("waiting", "Waiting for your answer");
  return "waiting";
}

if (!savedThread || (await pickUp()) !== "waiting") setStatus("ready", "Ready");
