// Drive the example page (examples/browser) in headless Chromium with playwright-core.
//
//   node browser.mjs - < job.json
//
// job: {"url": "http://127.0.0.1:PORT/", "chromium": "/usr/bin/chromium",
//       "userDataDir": "<a fresh folder>", "screenshot": "<png path>", "flow": "chat"}
// flow "chat" (the default) types `hello` and waits for the reply, then
// `permission x.txt`, clicks Approve and waits for the tool's result and the
// closing reply. "reload" says `hello`, asks `permission r.txt`, reloads the
// page while the approval waits (the page connects: POST /agui/connect), and
// approves on the card the reloaded page shows; the report's "before" and
// "restored" are what the page showed before and right after the reload.
// "reload-running" types `slow 3` and reloads while the answer streams: the
// reloaded page gets the rest live through its connect. "drop"
// types `slow 3` and waits for the whole answer (the test breaks the
// connection on the way). "rolling" types `slow 6` and waits for the end of the
// answer (the test stops the replica serving it on the way). It prints one JSON document: what the page shows,
// what the page logged, every URL it asked for, and the error if a step
// failed (exit status 0 either way).
import { launch, readJob } from "./chromium.mjs";

const job = readJob();

const report = { steps: [], transcript: [], before: null, restored: null, url: null, interrupt: null, console: [], pageErrors: [], requests: [], error: null };

async function transcript(page) {
  return page.$$eval("[data-testid=log] > li", (items) =>
    items.map((item) => ({ role: item.dataset.role, text: item.textContent })),
  );
}

async function waitForText(page, role, needle) {
  await page.waitForFunction(
    ([role, needle]) =>
      [...document.querySelectorAll(`[data-testid=log] > li[data-role="${role}"]`)].some((item) =>
        item.textContent.includes(needle),
      ),
    [role, needle],
  );
}

async function say(page, text) {
  await page.waitForSelector("[data-testid=status][data-state=ready]");
  await page.fill("[data-testid=prompt]", text);
  await page.click("[data-testid=send]");
}

async function chat(page) {
  await say(page, "hello");
  await waitForText(page, "assistant", 'You said: "hello"');
  await page.waitForSelector("[data-testid=status][data-state=ready]");
  report.steps.push("hello answered");

  await say(page, "permission x.txt");
  const approve = page.getByRole("button", { name: "Approve" });
  await approve.waitFor();
  await page.getByRole("button", { name: "Deny" }).waitFor();
  report.interrupt = await page.textContent("[data-testid=interrupt]");
  report.steps.push("interrupt shown");
  await approve.click();
  await waitForText(page, "tool-result", "Successfully wrote");
  await waitForText(page, "assistant", "x.txt was written");
  await page.waitForSelector("[data-testid=status][data-state=ready]");
  report.steps.push("approved and finished");
}

async function reload(page) {
  await say(page, "hello");
  await waitForText(page, "assistant", 'You said: "hello"');
  report.steps.push("hello answered");
  await say(page, "permission r.txt");
  await page.getByRole("button", { name: "Approve" }).waitFor();
  await page.waitForSelector("[data-testid=status][data-state=waiting]");
  report.steps.push("interrupt shown");
  report.before = await transcript(page);
  report.url = page.url();
  await page.reload();
  await page.waitForSelector("[data-testid=status][data-state=waiting]");
  const approve = page.getByRole("button", { name: "Approve" });
  await approve.waitFor();
  report.restored = await transcript(page);
  report.interrupt = await page.textContent("[data-testid=interrupt]");
  report.steps.push("interrupt shown again after the reload");
  await approve.click();
  await waitForText(page, "tool-result", "Successfully wrote");
  await waitForText(page, "assistant", "r.txt was written");
  await page.waitForSelector("[data-testid=status][data-state=ready]");
  report.steps.push("approved and finished");
}

async function reloadRunning(page) {
  await say(page, "slow 3");
  await waitForText(page, "assistant", "tick 3.");
  report.steps.push("answer streaming");
  report.url = page.url();
  await page.reload();
  await waitForText(page, "user", "slow 3");
  report.steps.push("reloaded");
  await waitForText(page, "assistant", "tick 15.");
  await page.waitForSelector("[data-testid=status][data-state=ready]");
  report.steps.push("answer complete");
}

async function drop(page) {
  await say(page, "slow 3");
  await waitForText(page, "note", "Connection lost");
  report.steps.push("connection lost");
  await waitForText(page, "assistant", "tick 15.");
  await page.waitForSelector("[data-testid=status][data-state=ready]");
  report.steps.push("answer complete");
}

async function rolling(page) {
  await say(page, "slow 6");
  await waitForText(page, "note", "Connection lost");
  report.steps.push("stream ended early");
  await waitForText(page, "assistant", "tick 30.");
  await page.waitForSelector("[data-testid=status][data-state=ready]");
  report.steps.push("answer complete");
}

const FLOWS = { chat, reload, "reload-running": reloadRunning, drop, rolling };

const context = await launch(job, { viewport: { width: 900, height: 820 } });
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(job.timeoutMs ?? 20_000);
  page.on("console", (message) => report.console.push({ type: message.type(), text: message.text() }));
  page.on("pageerror", (error) => report.pageErrors.push(String(error)));
  page.on("request", (request) => report.requests.push(request.url()));

  await page.goto(job.url);
  await page.waitForSelector("[data-testid=status][data-state=ready]");
  report.steps.push("loaded");
  await FLOWS[job.flow ?? "chat"](page);
} catch (error) {
  report.error = String(error?.stack ?? error);
} finally {
  const page = context.pages()[0];
  if (page) {
    report.transcript = await transcript(page).catch(() => []);
    if (job.screenshot) await page.screenshot({ path: job.screenshot, fullPage: true }).catch(() => {});
  }
  await context.close();
}
process.stdout.write(`${JSON.stringify(report)}\n`);
