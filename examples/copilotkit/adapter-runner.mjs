// A CopilotKit AgentRunner whose history is the adapter's: a reloaded page
// gets its conversation and its pending approval back from aguiadapter.
//
//   const runtime = new CopilotRuntime({
//     agents: { default: adapter },
//     runner: new AdapterHistoryRunner({ aguiUrl: "http://127.0.0.1:8000/" }),
//   });
//
// CopilotKit's runtime answers a page's POST /agent/:id/connect (what
// CopilotChat sends when it mounts with a threadId) from its runner's
// connect(). CopilotKit's InMemoryAgentRunner replays the events it kept in
// this process: nothing after a restart, nothing on another instance, and
// never an approval that is still waiting once its run has ended. This runner
// asks the adapter instead, POST {aguiUrl}/connect with the thread's id, and
// passes its stream on: a MESSAGES_SNAPSHOT with the conversation, a
// RUN_FINISHED whose outcome "interrupt" gives useInterrupt its card again, and
// a run still going on the thread, live to its end. A thread the adapter does
// not know (404) restores nothing, as with the in-memory runner. The connect
// goes through @aguiadapter/client's resumableFetch: a live run whose stream
// breaks re-attaches to its end.
//
// Runs themselves go through CopilotKit's InMemoryAgentRunner as before
// (run, isRunning and stop are its own): only where history comes from changes.
import { randomUUID } from "node:crypto";
import { runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { connectUrl, resumableFetch } from "@aguiadapter/client";
import { AgentRunner, InMemoryAgentRunner } from "@copilotkit/runtime/v2";

const NO_HISTORY = new Set([404, 405]);

export class AdapterHistoryRunner extends AgentRunner {
  /**
   * @param {object} options
   * @param {string} options.aguiUrl  the adapter's AG-UI endpoint (the HttpAgent's url)
   * @param {AgentRunner} [options.runs]  what runs, stops and tracks runs (default: an InMemoryAgentRunner)
   * @param {typeof fetch} [options.fetch]  (wrapped in resumableFetch)
   */
  constructor({ aguiUrl, runs = new InMemoryAgentRunner(), fetch: fetchImpl = globalThis.fetch }) {
    super();
    this.connectUrl = connectUrl(aguiUrl);
    this.runs = runs;
    this.fetch = resumableFetch({ fetch: (url, init) => fetchImpl(url, init) });
  }

  run(request) {
    return this.runs.run(request);
  }

  isRunning(request) {
    return this.runs.isRunning(request);
  }

  stop(request) {
    return this.runs.stop(request);
  }

  /**
   * The adapter's hydrate stream for the thread. `headers` are the ones
   * CopilotKit's runtime forwards for the agent (an Authorization header, say);
   * the adapter checks the thread's owner with them as on every route.
   */
  connect({ threadId, headers = {} }) {
    const input = {
      threadId,
      runId: randomUUID(),
      messages: [],
      state: {},
      tools: [],
      context: [],
      forwardedProps: {},
    };
    const request = async () => {
      const response = await this.fetch(this.connectUrl, {
        method: "POST",
        headers: { ...headers, "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify(input),
      });
      if (!NO_HISTORY.has(response.status)) return response;
      await response.body?.cancel();
      return new Response("", { status: 200, headers: { "Content-Type": "text/event-stream" } });
    };
    return transformHttpEventStream(runHttpRequest(request));
  }
}
