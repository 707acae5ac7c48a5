// A fetch for @ag-ui/client's HttpAgent whose runs survive a broken stream.
//
//   new HttpAgent({ url, threadId, fetch: resumableFetch({ onReattach }) })
//
// Every event of an aguiadapter run carries an SSE id (an opaque cursor).
// This fetch hands the agent a run's stream one whole event at a time and
// remembers the id of the last one. A run's stream is over only with its
// RUN_FINISHED or RUN_ERROR: one that stops before, for whatever reason (a
// network drop, a proxy that gives up, a replica that shuts down and closes
// its streams cleanly during a rolling deploy), is a truncated run. This
// fetch then re-attaches with GET <adapter>/threads/{threadId}/runs/{runId}/events
// and Last-Event-ID, on whichever replica answers, again and again until the
// terminal event arrives, and the agent reads on: the events after that id,
// once each, in order. Nothing else changes: a request that is not a run, a
// refusal (an HTTP error before the stream) and a stream without ids pass
// through as they are.
//
// A connect (POST .../connect, see connect.mjs) is one short run that
// restores the thread, and on a thread with a run still going, that run's
// events after it. Its stream is read to its end, not to the first
// RUN_FINISHED; a break inside the live run re-attaches to that run (the
// runId of its RUN_STARTED), a break inside the restoring run is the
// agent's error (connect again).
//
// No imports: it runs as is in a browser and in Node 20 or later.

const TERMINAL = new Set(["RUN_FINISHED", "RUN_ERROR"]);

// What a whole SSE block says: its id, whether its event ends a run, and the
// runId of a RUN_STARTED.
function blockInfo(block) {
  let id = null;
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("id:")) id = line.slice(line.startsWith("id: ") ? 4 : 3);
    else if (line.startsWith("data:")) data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
  }
  let terminal = false;
  let startedRunId = null;
  if (data.length) {
    try {
      const event = JSON.parse(data.join("\n"));
      terminal = TERMINAL.has(event.type);
      if (event.type === "RUN_STARTED" && typeof event.runId === "string") startedRunId = event.runId;
    } catch {
      // Not ours to judge: the agent's own parser will say what is wrong.
    }
  }
  return { id, terminal, startedRunId, isEvent: data.length > 0 };
}

function runOf(url, init) {
  if ((init?.method ?? "GET").toUpperCase() !== "POST" || typeof init?.body !== "string") return null;
  try {
    const { threadId, runId } = JSON.parse(init.body);
    if (typeof threadId !== "string" || typeof runId !== "string") return null;
    let base = new URL(String(url), globalThis.location?.href);
    const connect = base.pathname.endsWith("/connect");
    if (connect) base = new URL(base.pathname.slice(0, -"connect".length), base);
    const root = base.href.endsWith("/") ? base : new URL(`${base.href}/`);
    const events = (id) =>
      new URL(`threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(id)}/events`, root);
    return { threadId, runId, connect, events };
  } catch {
    return null;
  }
}

const pause = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });

// The wait before re-attach try number `attempt` (1: at once): doubling from
// delayMs, never more than maxDelayMs. A rolling deploy's new replica may
// take some seconds to listen; the defaults wait about 24 s in all.
export function reattachDelay(attempt, { delayMs = 250, maxDelayMs = 4000 } = {}) {
  return attempt <= 1 ? 0 : Math.min(delayMs * 2 ** (attempt - 2), maxDelayMs);
}

// Options: fetch (the one to wrap), attempts, delayMs and maxDelayMs (how
// often and how patiently to try a re-attach; the count starts again with
// every event that arrives), onReattach({threadId, runId, lastEventId,
// attempt}) before each try, onReattached({threadId, runId, lastEventId})
// once the run streams again.
export function resumableFetch({
  fetch: inner = globalThis.fetch.bind(globalThis),
  attempts = 10,
  delayMs = 250,
  maxDelayMs = 4000,
  onReattach,
  onReattached,
} = {}) {
  return async (url, init = {}) => {
    const response = await inner(url, init);
    const run = runOf(url, init);
    const streaming = (response.headers.get("content-type") ?? "").startsWith("text/event-stream");
    if (!run || !response.ok || !response.body || !streaming) return response;

    const signal = init.signal;
    const sent = new Headers(init.headers);
    const encoder = new TextEncoder();
    let reader = response.body.getReader();

    // The run a break re-attaches to: the request's own, or in a connect the
    // live run after the restoring one (null while there is none).
    let runId = run.connect ? null : run.runId;
    const body = new ReadableStream({
      async start(controller) {
        let lastId = null;
        let forwarded = 0;
        let tries = 0;
        let inRun = false;
        for (;;) {
          const decoder = new TextDecoder();
          let pending = "";
          let ended = false;
          try {
            for (;;) {
              const { value, done } = await reader.read();
              if (done) break;
              pending += decoder.decode(value, { stream: true });
              for (let at = pending.indexOf("\n\n"); at >= 0; at = pending.indexOf("\n\n")) {
                const block = pending.slice(0, at + 2);
                pending = pending.slice(at + 2);
                const info = blockInfo(block);
                if (info.startedRunId !== null && run.connect) {
                  // A run starts in the connect's stream: ids count from here.
                  inRun = true;
                  runId = info.startedRunId === run.runId ? null : info.startedRunId;
                  lastId = null;
                  forwarded = 0;
                }
                if (info.isEvent) {
                  forwarded += 1;
                  tries = 0;
                  if (info.id !== null) lastId = info.id;
                }
                controller.enqueue(encoder.encode(block));
                if (info.terminal) {
                  ended = true;
                  inRun = false;
                }
              }
              // A run's stream ends with its run; a connect's when the server ends it.
              if (ended && !run.connect) break;
            }
          } catch (error) {
            if (signal?.aborted) {
              controller.error(error);
              return;
            }
          }
          if (ended && (!run.connect || !inRun)) {
            controller.close();
            return;
          }
          if (runId === null) {
            controller.error(new TypeError("the connect stream broke before the thread was restored; connect again"));
            return;
          }
          // The stream stopped before the run's end. Without ids there is no
          // place to come back to once something was shown.
          if (forwarded > 0 && lastId === null) {
            controller.error(new TypeError("the run's stream broke and carries no event ids to resume from"));
            return;
          }
          reader = null;
          while (reader === null) {
            tries += 1;
            if (tries > attempts || signal?.aborted) {
              controller.error(new TypeError(`the run's stream broke and could not be re-attached (${tries - 1} tries)`));
              return;
            }
            if (tries > 1) await pause(reattachDelay(tries, { delayMs, maxDelayMs }), signal);
            onReattach?.({ threadId: run.threadId, runId, lastEventId: lastId, attempt: tries });
            const headers = new Headers({ Accept: "text/event-stream" });
            if (lastId !== null) headers.set("Last-Event-ID", lastId);
            if (sent.has("authorization")) headers.set("Authorization", sent.get("authorization"));
            try {
              const again = await inner(run.events(runId).href, { method: "GET", headers, signal });
              if (again.ok && again.body) {
                reader = again.body.getReader();
                onReattached?.({ threadId: run.threadId, runId, lastEventId: lastId });
              } else if (again.status >= 400 && again.status < 500) {
                // Unknown run, past its retention, someone else's: nothing to resume.
                const detail = await again.text().catch(() => "");
                controller.error(new TypeError(`the run could not be re-attached: HTTP ${again.status} ${detail}`));
                return;
              }
              // 5xx (a replica that drains says 503): try again, elsewhere or later.
            } catch {
              // Still no network: try again.
            }
          }
        }
      },
      cancel(reason) {
        return reader?.cancel(reason);
      },
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}
