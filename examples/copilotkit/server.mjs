// A CopilotKit runtime in front of the aguiadapter AG-UI server, and the page that uses it.
//
//   npm ci && npm run build && npm start            (then open http://127.0.0.1:3000/)
//   node server.mjs --agui-url http://127.0.0.1:8000/ --port 3000 --cwd /some/workspace
//
// Options: --agui-url (the adapter, default $AGUI_URL or http://127.0.0.1:8000/),
// --host (default 127.0.0.1), --port (default $PORT or 3000; 0 picks a free one),
// --cwd (the workspace the page sends; default a new temporary folder),
// --dist (the built pages, default dist/), --no-resume-middleware (see below),
// --no-cancelled-outcome-shim (see cancelled-outcome.mjs).
//
// One Node HTTP server:
//   /api/copilotkit/*   CopilotKit's own runtime (@copilotkit/runtime v2), whose one agent,
//                       "default", is @aguiadapter/client's AdapterHttpAgent (an AG-UI
//                       HttpAgent whose runs re-attach until their end) pointed at the adapter, and whose
//                       runner asks the adapter for a thread's history (adapter-runner.mjs);
//   /config.json        what the page puts in forwardedProps.iacCode (the workspace);
//   /                   the page with CopilotKit's v2 chat (index.html),
//   /classic            the same with the classic chat of @copilotkit/react-ui (classic.html),
//   /dist/*             what both load, built by `npm run build` (build.mjs).
//
// It listens on 127.0.0.1 unless told otherwise, and prints
// "copilotkit example on http://HOST:PORT/" once it does.
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

// CopilotKit's runtime reports usage to its makers unless told not to; this
// example talks to nobody but the adapter. Set before the runtime is loaded.
process.env.COPILOTKIT_TELEMETRY_DISABLED ??= "true";
process.env.DO_NOT_TRACK ??= "1";

const { AdapterHttpAgent } = await import("@aguiadapter/client");
const { CopilotRuntime, createCopilotRuntimeHandler } = await import("@copilotkit/runtime/v2");
const { createCopilotNodeHandler } = await import("@copilotkit/runtime/v2/node");
const { AdapterHistoryRunner } = await import("./adapter-runner.mjs");
const { withoutCancelledOutcome } = await import("./cancelled-outcome.mjs");

const here = path.dirname(fileURLToPath(import.meta.url));

const { values: options } = parseArgs({
  options: {
    "agui-url": { type: "string", default: process.env.AGUI_URL ?? "http://127.0.0.1:8000/" },
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: process.env.PORT ?? "3000" },
    cwd: { type: "string" },
    dist: { type: "string", default: "dist" },
    "no-resume-middleware": { type: "boolean", default: false },
    "no-cancelled-outcome-shim": { type: "boolean", default: false },
  },
});

// The workspace the page sends as forwardedProps.iacCode.cwd; the demo
// runtime's `permission x.txt` writes there, so the default is a new folder.
const workspace = path.resolve(options.cwd ?? mkdtempSync(path.join(tmpdir(), "agui-copilotkit-")));
mkdirSync(workspace, { recursive: true });

/**
 * Give a run that answers an interrupt a runId of its own.
 *
 * CopilotKit's useInterrupt (@copilotkit/react-core up to 1.74) sends the
 * resume under the runId of the run that was interrupted; AG-UI and the
 * adapter treat a resume as a new run, so the adapter refuses the reused id
 * with 409 RUN_ID_CONFLICT and the approval goes nowhere. Upstream bug
 * CopilotKit/CopilotKit#6999 (fix proposed in PR #7001): remove this
 * middleware once the CopilotKit release you use has the fix.
 */
function freshRunIdForResume(input, next) {
  const resuming = Array.isArray(input.resume) && input.resume.length > 0;
  return next.run(resuming ? { ...input, runId: randomUUID() } : input);
}

// A run whose stream stops before its end (a dropped connection, an adapter
// replica shut down in a rolling deploy) re-attaches with Last-Event-ID until
// its RUN_FINISHED or RUN_ERROR: the chat never keeps a cut-off reply.
// CopilotKit's @ag-ui/client 0.0.59 fails a run that ends with AG-UI 1.0's
// cancelled outcome (a question answered Cancel): withoutCancelledOutcome
// lets it end quietly; --no-cancelled-outcome-shim shows the failure.
const shim = options["no-cancelled-outcome-shim"] ? {} : { fetch: withoutCancelledOutcome() };
const adapter = new AdapterHttpAgent({ url: options["agui-url"], ...shim });
// --no-resume-middleware shows the upstream bug (the approval is refused);
// with a fixed CopilotKit it is how to check that the middleware can go.
if (!options["no-resume-middleware"]) adapter.use(freshRunIdForResume);

// A page that mounts with a threadId (a reload) connects: the adapter gives
// back the conversation, the pending approval and a run still going.
const runtime = new CopilotRuntime({
  agents: { default: adapter },
  runner: new AdapterHistoryRunner({ aguiUrl: options["agui-url"] }),
});
const copilotkit = createCopilotNodeHandler(createCopilotRuntimeHandler({ runtime, basePath: "/api/copilotkit" }));

const dist = path.resolve(here, options.dist);
if (!existsSync(path.join(dist, "v2.js")) || !existsSync(path.join(dist, "classic.js"))) {
  console.error("dist/ is missing: build the pages first with `npm run build`");
  process.exit(1);
}
const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".woff2": "font/woff2",
  ".woff": "font/woff",
  ".ttf": "font/ttf",
  ".svg": "image/svg+xml",
  ".png": "image/png",
};

/** index.html for "/", classic.html for "/classic", a built file for "/dist/...", else null. */
function staticFile(pathname) {
  if (pathname === "/" || pathname === "/index.html") return path.join(here, "index.html");
  if (pathname === "/classic" || pathname === "/classic.html") return path.join(here, "classic.html");
  if (!pathname.startsWith("/dist/")) return null;
  const file = path.resolve(dist, "." + decodeURIComponent(pathname.slice("/dist".length)));
  if (!file.startsWith(dist + path.sep) || !existsSync(file) || !statSync(file).isFile()) return null;
  return file;
}

const server = createServer((req, res) => {
  const { pathname } = new URL(req.url ?? "/", "http://localhost");
  if (pathname === "/api/copilotkit" || pathname.startsWith("/api/copilotkit/")) {
    copilotkit(req, res);
    return;
  }
  if (req.method !== "GET" && req.method !== "HEAD") {
    res.writeHead(405, { Allow: "GET, HEAD" }).end();
    return;
  }
  if (pathname === "/config.json") {
    res.writeHead(200, { "Content-Type": "application/json", "Cache-Control": "no-cache" });
    res.end(JSON.stringify({ cwd: workspace }));
    return;
  }
  const file = staticFile(pathname);
  if (file === null) {
    res.writeHead(404, { "Content-Type": "text/plain" }).end("not found");
    return;
  }
  res.writeHead(200, {
    "Content-Type": TYPES[path.extname(file)] ?? "application/octet-stream",
    "Cache-Control": "no-cache",
  });
  res.end(req.method === "HEAD" ? undefined : readFileSync(file));
});

server.listen(Number(options.port), options.host, () => {
  const { address, port } = server.address();
  const host = address.includes(":") ? `[${address}]` : address;
  console.log(`copilotkit example on http://${host}:${port}/`);
  console.log(`  adapter: ${options["agui-url"]}  workspace: ${workspace}`);
});

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
