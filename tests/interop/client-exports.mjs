// What @aguiadapter/client exports, as an application imports it (for test_client_package.py).
//
//   node client-exports.mjs - < /dev/null        prints one JSON document
import { HttpAgent } from "@ag-ui/client";
import * as client from "@aguiadapter/client";
import * as core from "@aguiadapter/client/core";

const plain = (url, init) => fetch(url, init);
const agent = new client.AdapterHttpAgent({ url: "http://127.0.0.1:9/", fetch: plain });
const bare = new client.AdapterHttpAgent({ url: "http://127.0.0.1:9/", fetch: plain, reattach: false });
process.stdout.write(`${JSON.stringify({
  "@aguiadapter/client": Object.keys(client).sort(),
  "@aguiadapter/client/core": Object.keys(core).sort(),
  agent: {
    isHttpAgent: agent instanceof HttpAgent,
    connects: typeof agent.connect === "function" && agent.connectStatus === null,
    reattaches: agent.fetch !== plain,
    plainWithoutReattach: bare.fetch === plain,
  },
  delays: [1, 2, 3, 4, 5, 6, 7].map((attempt) => client.reattachDelay(attempt)),
})}\n`);
