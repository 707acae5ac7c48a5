// Bundle @ag-ui/client for the example page (examples/browser) with esbuild.
//
//   node build-browser.mjs            writes examples/browser/static/agui-client.js
//   node build-browser.mjs OUTFILE    writes OUTFILE instead (tests compare it with the committed one)
//
// The entry lives beside the example; the packages come from this folder's
// node_modules (npm ci), so the bundle is the lockfile's @ag-ui/client 1.0.0.
// @ag-ui/proto (the protobuf transport, unused by an SSE page) is replaced by
// examples/browser/src/proto-stub.mjs, which keeps the bundle near 380 KB.
import { fileURLToPath } from "node:url";
import path from "node:path";
import { build } from "esbuild";

const here = path.dirname(fileURLToPath(import.meta.url));
const example = path.resolve(here, "../../examples/browser");
const outfile = path.resolve(process.argv[2] ?? path.join(example, "static/agui-client.js"));

const result = await build({
  entryPoints: [path.join(example, "src/agui-client.entry.mjs")],
  outfile,
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2020"],
  minify: true,
  legalComments: "eof",
  nodePaths: [path.join(here, "node_modules")],
  alias: { "@ag-ui/proto": path.join(example, "src/proto-stub.mjs") },
  absWorkingDir: here,
  logLevel: "warning",
  metafile: true,
  banner: { js: "// @ag-ui/client 1.0.0 (MIT) and its dependencies, bundled by tests/interop/build-browser.mjs; do not edit." },
});
const bytes = Object.values(result.metafile.outputs)[0].bytes;
process.stdout.write(`${path.relative(process.cwd(), outfile)}: ${bytes} bytes\n`);
