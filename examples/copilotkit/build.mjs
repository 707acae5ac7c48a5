// Build the two pages (src/v2.tsx, src/classic.tsx and the CSS they import) into dist/ with esbuild.
//
//   npm run build          (node build.mjs: writes dist/)
//   node build.mjs OUTDIR  (writes OUTDIR instead; the interop test builds into a temporary folder)
//
// dist/ is not committed: it is built from this folder's lockfile. The
// entries are small; the chunks/ folder holds what CopilotKit loads on demand
// (syntax highlighting grammars, diagrams, math fonts).
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = path.dirname(fileURLToPath(import.meta.url));

const outdir = path.resolve(process.argv[2] ?? path.join(here, "dist"));
const result = await build({
  absWorkingDir: here,
  entryPoints: { v2: "src/v2.tsx", classic: "src/classic.tsx" },
  outdir,
  bundle: true,
  splitting: true,
  chunkNames: "chunks/[name]-[hash]",
  assetNames: "assets/[name]-[hash]",
  format: "esm",
  platform: "browser",
  target: ["es2022"],
  jsx: "automatic",
  minify: true,
  define: { "process.env.NODE_ENV": '"production"' },
  loader: { ".woff": "file", ".woff2": "file", ".ttf": "file", ".svg": "file", ".png": "file" },
  legalComments: "none",
  logLevel: "warning",
  metafile: true,
});
const outputs = Object.entries(result.metafile.outputs);
for (const [file, { bytes }] of outputs) {
  const name = path.relative(outdir, path.resolve(here, file));
  if (!name.includes(path.sep)) process.stdout.write(`${name}: ${bytes} bytes\n`);
}
const total = outputs.reduce((sum, [, { bytes }]) => sum + bytes, 0);
process.stdout.write(`${process.argv[2] ?? "dist"}: ${outputs.length} files, ${(total / 1e6).toFixed(1)} MB in all\n`);
