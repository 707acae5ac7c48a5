// Drive an AG-UI server with the official @ag-ui/client HttpAgent and print,
// as one JSON document on stdout, what the agent's state ends up holding.
//
//   node drive.mjs plan.json        (or: node drive.mjs - < plan.json)
//
// A plan is
//   {
//     "url": "http://127.0.0.1:PORT/",
//     "threadId": "...",
//     "forwardedProps": {"iacCode": {...}},
//     "headers": {...},                       optional extra request headers
//     "resumeVariant": "as-is",               optional, see rewriteResumedRun()
//     "tamper": "none",                       optional, see tamper()
//     "resumable": false,                     optional: the agent re-attaches a run whose
//                                             stream stopped short (@aguiadapter/client's
//                                             resumableFetch, with Last-Event-ID)
//     "steps": [ step, ... ]
//   }
// and a step is one of
//   {"say": "text", "id": "u1"}   add a user message, then runAgent()
//   {"resume": {"status": "resolved", "payload": {...}}}
//                                 answer every interrupt in agent.pendingInterrupts
//                                 (buildResumeArray) and runAgent({runId, forwardedProps, resume})
//   {"resume": {...}, "fromSaved": true}
//                                 the same, answering the interrupts the driver saw last
//                                 (for a client that lost its state)
//   {"run": true}                 runAgent() with no new message and no resume
//   {"connect": true}             connectAgent(): POST {url}/connect through
//                                 @aguiadapter/client's connect() (what a reloaded page does)
//   {"newClient": true}           replace the agent by a fresh HttpAgent on the same thread
//   {"forgetInterrupts": true}    set agent.pendingInterrupts = [] (what an application must do
//                                 after a resumed run that ended in RUN_ERROR)
//
// Errors are data: a step whose runAgent() rejects records the error and the
// driver goes on. Exit status 0 when a summary was printed, 2 when the plan is
// unusable.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";
import { buildResumeArray } from "@ag-ui/client";
// clients/js, installed from its folder as npm would install it from the registry.
import { AdapterHttpAgent } from "@aguiadapter/client";

const require = createRequire(import.meta.url);

function readPlan() {
  const where = process.argv[2] ?? "-";
  const text = where === "-" ? readFileSync(0, "utf8") : readFileSync(where, "utf8");
  return JSON.parse(text);
}

function installedVersion(name) {
  try {
    return require(`${name}/package.json`).version;
  } catch {
    // Packages whose exports hide package.json: read it from node_modules.
    const url = new URL(`./node_modules/${name}/package.json`, import.meta.url);
    return JSON.parse(readFileSync(url, "utf8")).version;
  }
}

// Everything the client says on the console is evidence: enforcement strips
// unknown material with a "[ag-ui][enforce]" warning, the reducer warns about
// ids it cannot place, a failed run is logged with console.error.
const consoleLines = [];
for (const level of ["warn", "error", "log", "info", "debug"]) {
  console[level] = (...args) => {
    consoleLines.push({
      level,
      text: args.map((a) => (a instanceof Error ? `${a.name}: ${a.message}` : typeof a === "string" ? a : safeJson(a))).join(" "),
    });
  };
}

function safeJson(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

// --- SSE helpers -----------------------------------------------------------

function sseBlocks(text) {
  return text.split("\n\n").filter((block) => block.length > 0);
}

function blockEvent(block) {
  const data = block
    .split("\n")
    .filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5));
  return data.length ? JSON.parse(data.join("\n")) : null;
}

function sseOf(event) {
  return `data: ${JSON.stringify(event)}\n\n`;
}

// --- the transport: real fetch, with the request and the raw body recorded --

function makeFetch(plan, exchanges, knownToolCalls) {
  return async (url, init) => {
    const exchange = {
      url: String(url),
      method: (init.method ?? "GET").toUpperCase(),
      request: typeof init.body === "string" ? JSON.parse(init.body) : null,
      lastEventId: new Headers(init.headers).get("last-event-id"),
      status: null,
      contentType: null,
      body: "",
      rewritten: null,
    };
    exchanges.push(exchange);
    const response = await fetch(url, init);
    exchange.status = response.status;
    exchange.contentType = response.headers.get("content-type");
    const isResume = Array.isArray(exchange.request?.resume) && exchange.request.resume.length > 0;
    const variant = plan.resumeVariant ?? "as-is";
    const tampering = (plan.tamper ?? "none") !== "none";
    if (!response.ok || !response.body || ((variant === "as-is" || !isResume) && !tampering)) {
      if (!response.body) return response;
      // Pass the stream through untouched, keeping a copy of its bytes.
      const decoder = new TextDecoder();
      const copy = new TransformStream({
        transform(chunk, controller) {
          exchange.body += decoder.decode(chunk, { stream: true });
          controller.enqueue(chunk);
        },
        flush() {
          exchange.body += decoder.decode();
        },
      });
      return new Response(response.body.pipeThrough(copy), {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
    }
    // Experiments: read the whole run, rewrite it, hand the rewritten bytes to the client.
    exchange.body = await response.text();
    let text = exchange.body;
    if (isResume && variant !== "as-is") text = rewriteResumedRun(text, variant, knownToolCalls);
    if (tampering) text = tamper(text, plan.tamper);
    exchange.rewritten = text;
    return new Response(text, { status: response.status, headers: response.headers });
  };
}

// How a server could report, in a resumed run, the result of a tool call that
// was started (and ended) in the run before the interrupt. The server's own
// shape is "as-is"; the others are rewrites of the resumed run, made from it
// whatever the server sends (the re-open events of an earlier run's call, if
// any, are dropped first):
//   result-only  TOOL_CALL_RESULT alone
//   reopen       TOOL_CALL_START + TOOL_CALL_END (same id and name, no args), then the result
//   reopen-args  TOOL_CALL_START + TOOL_CALL_ARGS (the original args again) + TOOL_CALL_END, then the result
function rewriteResumedRun(text, variant, knownToolCalls) {
  const earlier = new Set(knownToolCalls.keys()); // calls started by the runs before this one
  const startedHere = new Set();
  let out = "";
  for (const block of sseBlocks(text)) {
    const event = blockEvent(block);
    const id = event?.toolCallId;
    if (["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"].includes(event?.type) && earlier.has(id)) continue;
    if (event?.type === "TOOL_CALL_START") startedHere.add(id);
    if (event?.type === "TOOL_CALL_RESULT" && !startedHere.has(id) && variant !== "result-only") {
      const known = knownToolCalls.get(id) ?? { name: "unknown", args: "" };
      out += sseOf({ type: "TOOL_CALL_START", toolCallId: id, toolCallName: known.name });
      if (variant === "reopen-args" && known.args) {
        out += sseOf({ type: "TOOL_CALL_ARGS", toolCallId: id, delta: known.args });
      }
      out += sseOf({ type: "TOOL_CALL_END", toolCallId: id });
      startedHere.add(id);
    }
    out += `${block}\n\n`;
  }
  return out;
}

// Negative controls, to show that the client's verification is really on:
//   second-run-started  repeats RUN_STARTED right after the first one
//   orphan-content      drops every TEXT_MESSAGE_START
function tamper(text, how) {
  let out = "";
  let doubled = false;
  for (const block of sseBlocks(text)) {
    const event = blockEvent(block);
    if (how === "orphan-content" && event?.type === "TEXT_MESSAGE_START") continue;
    out += `${block}\n\n`;
    if (how === "second-run-started" && event?.type === "RUN_STARTED" && !doubled) {
      out += `${block}\n\n`;
      doubled = true;
    }
  }
  return out;
}

// --- the run loop ------------------------------------------------------------

function errorOf(error) {
  if (!error) return null;
  return {
    name: error.name ?? "Error",
    constructor: error.constructor?.name ?? null,
    message: String(error.message ?? error),
    ...(error.status !== undefined ? { status: error.status } : {}),
    ...(error.payload !== undefined ? { payload: error.payload } : {}),
  };
}

function isVerificationError(error) {
  // verifyEvents throws AGUIError("Cannot send ..." / "First event must be ...").
  return (
    error !== null &&
    (error.constructor === "AGUIError" || error.name === "AGUIError") &&
    /^(Cannot send|First event must be|Step ")/.test(error.message)
  );
}

async function main() {
  let plan;
  try {
    plan = readPlan();
    if (!plan.url || !plan.threadId || !Array.isArray(plan.steps)) throw new Error("plan needs url, threadId and steps");
  } catch (error) {
    process.stderr.write(`drive.mjs: unusable plan: ${error.message}\n`);
    process.exit(2);
  }

  const exchanges = [];
  const knownToolCalls = new Map(); // toolCallId -> {name, args}, from every run seen
  const reattaches = [];
  const newAgent = () =>
    new AdapterHttpAgent({
      url: plan.url,
      threadId: plan.threadId,
      headers: plan.headers ?? {},
      fetch: makeFetch(plan, exchanges, knownToolCalls),
      reattach: plan.resumable ? { onReattach: (seen) => reattaches.push(seen) } : false,
    });
  let agent = newAgent();
  let savedInterrupts = [];
  const steps = [];

  for (const step of plan.steps) {
    if (step.newClient) {
      agent = newAgent();
      steps.push({ kind: "newClient" });
      continue;
    }
    if (step.forgetInterrupts) {
      steps.push({ kind: "forgetInterrupts", forgotten: agent.pendingInterrupts.map((i) => i.id) });
      agent.pendingInterrupts = [];
      continue;
    }
    const record = {
      kind: step.say !== undefined ? "say" : step.resume ? "resume" : step.connect ? "connect" : "run",
      runId: `run-${randomUUID()}`,
      requestSent: false,
      request: null,
      httpStatus: null,
      events: [],
      eventTypes: [],
      runError: null,
      outcome: null,
      error: null,
      verificationError: false,
      sse: null,
      rewrittenSse: null,
      pendingInterruptsBefore: structuredClone(agent.pendingInterrupts),
      pendingInterruptsAfter: [],
      newMessageIds: [],
    };
    const params = { runId: record.runId, forwardedProps: plan.forwardedProps ?? {} };
    try {
      if (step.say !== undefined) {
        agent.addMessage({ id: step.id ?? `user-${randomUUID()}`, role: "user", content: step.say });
      }
      if (step.resume) {
        const open = step.fromSaved ? savedInterrupts : agent.pendingInterrupts;
        const answers = Object.fromEntries(open.map((interrupt) => [interrupt.id, step.resume]));
        params.resume = buildResumeArray(open, answers);
      }
    } catch (error) {
      record.error = errorOf(error);
      steps.push(record);
      continue;
    }

    const before = exchanges.length;
    const subscriber = {
      onEvent({ event }) {
        record.events.push(event);
        record.eventTypes.push(event.type);
        // Name and args of each tool call as the run that first started it sent them.
        if (event.type === "TOOL_CALL_START" && !knownToolCalls.has(event.toolCallId)) {
          knownToolCalls.set(event.toolCallId, { name: event.toolCallName, args: "", runId: record.runId });
        } else if (event.type === "TOOL_CALL_ARGS" && knownToolCalls.get(event.toolCallId)?.runId === record.runId) {
          knownToolCalls.get(event.toolCallId).args += event.delta;
        }
      },
      onRunErrorEvent({ event }) {
        record.runError = { code: event.code ?? null, message: event.message };
      },
      onRunFinishedEvent(params) {
        record.outcome = params.event.outcome ?? { type: "success" };
        if (params.outcome === "interrupt") savedInterrupts = params.interrupts;
      },
    };
    try {
      const result = step.connect ? await agent.connectAgent(params, subscriber) : await agent.runAgent(params, subscriber);
      record.newMessageIds = result.newMessages.map((m) => m.id);
      if (step.connect) record.connectStatus = agent.connectStatus;
    } catch (error) {
      record.error = errorOf(error);
      record.verificationError = isVerificationError(record.error);
    }
    const exchange = exchanges[before];
    if (exchange) {
      record.requestSent = true;
      record.request = exchange.request;
      record.httpStatus = exchange.status;
      record.sse = exchange.body;
      record.rewrittenSse = exchange.rewritten;
    }
    // Every request of the step: the run's POST, then any re-attach (resumable).
    record.exchanges = exchanges.slice(before).map(({ url, method, lastEventId, status, body }) => ({ url, method, lastEventId, status, body }));
    record.pendingInterruptsAfter = structuredClone(agent.pendingInterrupts);
    steps.push(record);
  }

  const messages = agent.messages;
  const toolCalls = messages.flatMap((m) =>
    (m.toolCalls ?? []).map((tc) => ({ messageId: m.id, id: tc.id, name: tc.function.name, arguments: tc.function.arguments })),
  );
  const toolResults = messages
    .filter((m) => m.role === "tool")
    .map((m) => ({ messageId: m.id, toolCallId: m.toolCallId, content: m.content }));
  const errors = steps.filter((s) => s.error).map((s) => s.error);
  const summary = {
    client: { "@ag-ui/client": installedVersion("@ag-ui/client"), "@ag-ui/core": installedVersion("@ag-ui/core") },
    threadId: agent.threadId,
    steps,
    messages,
    roles: messages.map((m) => m.role),
    toolCalls,
    toolResults,
    pendingInterrupts: agent.pendingInterrupts,
    errors,
    verificationErrors: steps.filter((s) => s.verificationError).map((s) => s.error),
    reattaches,
    console: consoleLines,
  };
  process.stdout.write(`${JSON.stringify(summary)}\n`);
}

main().catch((error) => {
  process.stderr.write(`drive.mjs: ${error?.stack ?? error}\n`);
  process.exit(2);
});
