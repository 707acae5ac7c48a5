// What the example page needs from @ag-ui/client, bundled for the browser by
// tests/interop/build-browser.mjs into ../static/agui-client.js.
export { HttpAgent, buildResumeArray } from "@ag-ui/client";
