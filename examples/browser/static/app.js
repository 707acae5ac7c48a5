// The example page: one AG-UI thread with @ag-ui/client's HttpAgent.
//
// Text streams into the page as TEXT_MESSAGE_CONTENT arrives; an interrupt
// (RUN_FINISHED with outcome "interrupt") becomes a card with buttons, and a
// button answers it through the client's own resume support: the agent keeps
// the interrupts in agent.pendingInterrupts, buildResumeArray() answers every
// one of them, and runAgent({runId, forwardedProps, resume}) sends the answer.
//
// Two things survive here what usually ends a chat: a dropped connection
// (the agent's fetch is resumableFetch, which re-attaches to the run with the
// id of the last event it got) and a reload (the thread id is kept in
// sessionStorage; GET /threads/{threadId} says whether it waits for an
// answer, and its pendingInterrupts become the agent's again).
import { HttpAgent, buildResumeArray } from "./agui-client.js";
import { resumableFetch } from "./resumable-fetch.mjs";

const $ = (selector) => document.querySelector(selector);
const log = $("[data-testid=log]");
const form = $("[data-testid=composer]");
const prompt = $("[data-testid=prompt]");
const send = $("[data-testid=send]");
const status = $("[data-testid=status]");

const config = await (await fetch("/config.json")).json();
// The thread this tab talks on, kept across reloads once a run was sent on it.
const THREAD_KEY = "aguiadapter-example-thread";
const savedThread = sessionStorage.getItem(THREAD_KEY);
const agent = new HttpAgent({
  url: config.aguiUrl,
  threadId: savedThread ?? `browser-${crypto.randomUUID()}`,
  fetch: resumableFetch({
    onReattach: ({ attempt }) => {
      if (attempt === 1) add("note", "Connection lost: picking the answer up where it broke off…");
      setStatus("reconnecting", "Reconnecting…");
    },
    onReattached: () => setStatus("running", "The agent is working…"),
  }),
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

async function run(parameters) {
  sessionStorage.setItem(THREAD_KEY, agent.threadId);
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

// A reloaded page: what does its thread wait for? (A run still going is
// waited for; its reply was shown to the page that sent it.)
async function pickUp() {
  for (;;) {
    const response = await fetch(`${config.aguiUrl}threads/${encodeURIComponent(agent.threadId)}`);
    if (!response.ok) return;
    const thread = await response.json();
    if (thread.state === "running") {
      setStatus("running", "The agent is still working on this thread…");
      await new Promise((resolve) => setTimeout(resolve, 1000));
      continue;
    }
    if (thread.state === "interrupted" && thread.pendingInterrupts.length) {
      invocation = thread.rosInvocationId ?? invocation;
      agent.pendingInterrupts = thread.pendingInterrupts;
      add("note", "Picked up where you left: the agent waits for your answer.");
      for (const interrupt of thread.pendingInterrupts) showInterrupt(interrupt);
      setStatus("waiting", "Waiting for your answer");
      return "waiting";
    }
    return;
  }
}

if (!savedThread || (await pickUp()) !== "waiting") setStatus("ready", "Ready");
