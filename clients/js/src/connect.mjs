// connect() for @ag-ui/client's HttpAgent: a reloaded page gets its thread back.
//
//   import { HttpAgent } from "@ag-ui/client";
//   const ConnectingAgent = withConnect(HttpAgent);
//   const agent = new ConnectingAgent({ url, threadId });
//   await agent.connectAgent({}, subscriber);           // messages, pending interrupts, a live run
//
// @ag-ui/client 1.0 has connectAgent() but its HttpAgent has no connect(): the
// base class throws "not implemented" and connectAgent() quietly does nothing.
// AG-UI's convention for it is POST {url}/connect with a RunAgentInput,
// answered like a run: RUN_STARTED, MESSAGES_SNAPSHOT, RUN_FINISHED (its
// outcome "interrupt" restores agent.pendingInterrupts), and on aguiadapter,
// when a run is still going on the thread, that run's events after it, live.
// 404 and 405 mean "no history here": the agent gets no events and
// `agent.connectStatus` says which status it was.
//
// connectAgent() judges the stream exactly as runAgent() does (enforceEvents,
// verifyEvents) and applies it with the same reducer. The request is the
// agent's own run request (its headers, its fetch, its abort signal), sent to
// another URL: HttpAgent.run() called on a view of this agent whose `url` and
// `fetch` are the connect ones.
//
// No imports: it takes the HttpAgent class it extends, so it works with the
// @ag-ui/client the application has (1.0, or the 0.0.x CopilotKit's runtime uses).

const NO_HISTORY = new Set([404, 405]);

/** {url}/connect, with or without a trailing slash on the agent's URL. */
export function connectUrl(url) {
  const base = new URL(String(url), globalThis.location?.href);
  base.pathname = `${base.pathname.replace(/\/+$/, "")}/connect`;
  return base.href;
}

export function withConnect(HttpAgent) {
  return class ConnectingHttpAgent extends HttpAgent {
    /** The HTTP status of the last connect request (null before the first one). */
    connectStatus = null;

    connect(input) {
      const noHistoryIsEmpty = async (url, init) => {
        const response = await this.fetch(url, init);
        this.connectStatus = response.status;
        if (!NO_HISTORY.has(response.status)) return response;
        await response.body?.cancel();
        return new Response("", { status: 200, headers: { "Content-Type": "text/event-stream" } });
      };
      const connecting = Object.create(this, {
        url: { value: connectUrl(this.url) },
        fetch: { value: noHistoryIsEmpty },
      });
      return super.run.call(connecting, input);
    }
  };
}
