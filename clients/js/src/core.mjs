// Everything of @aguiadapter/client that needs no @ag-ui/client of its own:
// pass it the HttpAgent class you have (any @ag-ui/client from 0.0.59 to 1.x).
//
//   import { HttpAgent } from "@ag-ui/client";
//   import { withAdapter } from "@aguiadapter/client/core";
//   const AdapterHttpAgent = withAdapter(HttpAgent);
//
// The default entry ("@aguiadapter/client") does exactly this with the
// @ag-ui/client it finds next to it.
import { withConnect } from "./connect.mjs";
import { resumableFetch } from "./resumable-fetch.mjs";

export { connectUrl, withConnect } from "./connect.mjs";
export { reattachDelay, resumableFetch } from "./resumable-fetch.mjs";

/**
 * HttpAgent with both halves of what an aguiadapter front end needs:
 * runs that re-attach until their RUN_FINISHED or RUN_ERROR (its fetch is a
 * resumableFetch around the one given, or the global fetch), and
 * connectAgent() that restores a thread (POST {url}/connect).
 *
 * The constructor takes HttpAgent's config plus `reattach`: the options of
 * resumableFetch (attempts, delayMs, maxDelayMs, onReattach, onReattached),
 * or `false` to leave the fetch as it is.
 */
export function withAdapter(HttpAgent) {
  return class AdapterHttpAgent extends withConnect(HttpAgent) {
    constructor({ reattach = {}, ...config } = {}) {
      const fetch = config.fetch ?? ((url, init) => globalThis.fetch(url, init));
      super({ ...config, fetch: reattach === false ? fetch : resumableFetch({ ...reattach, fetch }) });
    }
  };
}
