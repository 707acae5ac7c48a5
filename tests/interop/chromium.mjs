// What the browser drivers (browser.mjs, copilotkit.mjs) share: the job they
// read (a JSON file named by their first argument, or "-" / none for stdin)
// and Debian's Chromium launched headless with the project's flags.
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

// playwright-core adds --headless (headless: true) and --no-sandbox
// (chromiumSandbox: false), and takes the profile folder as
// launchPersistentContext's first argument (--user-data-dir).
const FLAGS = [
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export function readJob() {
  const source = process.argv[2] === undefined || process.argv[2] === "-" ? 0 : process.argv[2];
  return JSON.parse(readFileSync(source, "utf8"));
}

// A persistent context in job.userDataDir, with job.chromium; `options` adds
// to (or overrides) the launch options, e.g. the viewport.
export function launch(job, options = {}) {
  return chromium.launchPersistentContext(job.userDataDir, {
    executablePath: job.chromium,
    headless: true,
    chromiumSandbox: false,
    args: FLAGS,
    timeout: 60_000,
    ...options,
  });
}
