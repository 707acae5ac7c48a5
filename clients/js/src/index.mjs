// @aguiadapter/client: @ag-ui/client's HttpAgent for an aguiadapter server.
//
//   import { AdapterHttpAgent } from "@aguiadapter/client";
//   const agent = new AdapterHttpAgent({ url: "/agui/", threadId });
//   await agent.runAgent({ forwardedProps }, subscriber);   // re-attaches until the run's end
//   await agent.connectAgent({ forwardedProps }, subscriber); // after a reload: the thread back
//
// See README.md. The HttpAgent it extends is the application's own
// @ag-ui/client (a peer dependency); "@aguiadapter/client/core" has the same
// without that import, for an HttpAgent from elsewhere.
import { HttpAgent } from "@ag-ui/client";
import { withAdapter } from "./core.mjs";

export * from "./core.mjs";

export const AdapterHttpAgent = withAdapter(HttpAgent);
