// A fetch that lets CopilotKit 1.74/1.75 read AG-UI 1.0's cancelled runs.
//
// The adapter ends a run stopped on purpose (the cancel route, a question
// answered Cancel, shutdown) as AG-UI 1.0 says: RUN_FINISHED with
// `outcome: {"type": "cancelled"}`. CopilotKit's packages bundle
// @ag-ui/client 0.0.59, whose HttpAgent checks every event against its own
// schema, which knows two outcomes, success and interrupt: the cancelled one
// fails that check and the whole run errors, so the chat shows an error
// where the person only pressed Cancel. This fetch takes the outcome off
// such a RUN_FINISHED before the agent reads it (a RUN_FINISHED without an
// outcome is how clients before 1.0 read a run that ended): the run ends
// quietly, as it did. Everything else passes byte for byte.
//
// Remove it once a CopilotKit release bundles an @ag-ui/client that knows
// the cancelled outcome (1.0 or later); `node server.mjs
// --no-cancelled-outcome-shim` shows whether the one you use does.

/** Wrap `inner` (default: the global fetch): a cancelled outcome is dropped from event streams. */
export function withoutCancelledOutcome(inner = (url, init) => globalThis.fetch(url, init)) {
  return async (url, init) => {
    const response = await inner(url, init);
    const type = response.headers.get("content-type") ?? "";
    if (!type.startsWith("text/event-stream") || response.body === null) return response;
    const decoder = new TextDecoder();
    const encoder = new TextEncoder();
    let carry = "";
    const body = response.body.pipeThrough(
      new TransformStream({
        transform(chunk, controller) {
          carry += decoder.decode(chunk, { stream: true });
          const cut = carry.lastIndexOf("\n");
          if (cut < 0) return;
          controller.enqueue(encoder.encode(rewrite(carry.slice(0, cut + 1))));
          carry = carry.slice(cut + 1);
        },
        flush(controller) {
          carry += decoder.decode();
          if (carry) controller.enqueue(encoder.encode(rewrite(carry)));
        },
      }),
    );
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}

/** Whole SSE lines in, the same lines out, a cancelled RUN_FINISHED without its outcome. */
function rewrite(lines) {
  return lines
    .split("\n")
    .map((line) => {
      // Cheap tests first: only a RUN_FINISHED that mentions "cancelled" is parsed.
      if (!line.startsWith("data:") || !line.includes("RUN_FINISHED") || !line.includes("cancelled")) return line;
      const event = JSON.parse(line.slice("data:".length));
      if (event.type !== "RUN_FINISHED" || event.outcome?.type !== "cancelled") return line;
      delete event.outcome;
      return `data: ${JSON.stringify(event)}`;
    })
    .join("\n");
}
