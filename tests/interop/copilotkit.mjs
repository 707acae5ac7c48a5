// Chat through the CopilotKit example (examples/copilotkit) in headless Chromium.
//
//   node copilotkit.mjs - < job.json
//
// job: {"url": "http://127.0.0.1:PORT/" or ".../classic", "ui": "v2" | "classic",
//       "chromium": "/usr/bin/chromium", "userDataDir": "<a fresh folder>",
//       "screenshot": "<png path>", "locale": "en-US", "expectRefusal": false}
// It types into CopilotKit's own chat as a person would: `hello`, then
// `tool`, then `permission x.txt`, clicks Approve on the approval card and
// waits for the tool's result and the closing reply, then `hello again`.
// With "flow": "reload" it says `hello`, asks `permission x.txt`, reloads the
// page (its URL carries ?thread=...) while the approval waits, and approves on
// the card the reloaded page shows; "before" and "restored" in the report are
// what the chat showed before and right after the reload.
// With "flow": "cancel-question" it asks `question`, clicks Cancel on the
// question's card, and once that run has ended says `hello again`;
// "afterCancel" in the report is what the chat showed right after the
// cancelled run ended (the error banner, if any, clears at the next run).
// "stopAfterCancel" stops there.
// With "flow": "attachment" it attaches an SVG image (the chat's file input)
// to `look at this`, waits for the reply and the example's notice of what
// the adapter left out ("skipped" in the report), then says `hello again`.
// With "expectRefusal" (the example started with --no-resume-middleware) it
// only asks for the permission, clicks Approve and stops once the run that
// carried the answer has ended and the page shows the error.
// It prints one JSON document: what the page shows, what it logged, every URL
// it asked for, and the error if a step failed (exit status 0 either way).
import { launch, readJob } from "./chromium.mjs";

const job = readJob();

// CopilotKit's own markup: the v2 chat and the classic one differ.
const UI = {
  v2: {
    user: "[data-testid=copilot-user-message]",
    assistant: "[data-testid=copilot-assistant-message]",
    idle: "[data-testid=copilot-chat][data-copilot-running=false]",
  },
  classic: {
    user: ".copilotKitUserMessage",
    assistant: ".copilotKitAssistantMessage",
    idle: "[data-testid=copilot-send-button][data-copilotkit-in-progress=false]",
  },
}[job.ui];
// The example's own cards.
const ROLES = { ...UI, skipped: "[data-testid=skipped]", tool: "[data-testid=tool-call]", approval: "[data-testid=approval]", error: "[data-testid=error]" };
delete ROLES.idle;

const report = { steps: [], transcript: [], before: null, restored: null, afterCancel: null, url: null, approval: null, console: [], pageErrors: [], requests: [], error: null };

async function transcript(page) {
  return page.evaluate((roles) => {
    const selector = Object.values(roles).join(", ");
    return [...document.querySelectorAll(selector)].map((element) => ({
      role: Object.keys(roles).find((role) => element.matches(roles[role])),
      text: element.innerText.trim(),
    }));
  }, ROLES);
}

async function waitForText(page, role, needle) {
  await page.waitForFunction(
    ([selector, needle]) => [...document.querySelectorAll(selector)].some((element) => element.innerText.includes(needle)),
    [ROLES[role], needle],
  );
}

async function say(page, text) {
  await page.waitForSelector(UI.idle);
  await page.fill("[data-testid=copilot-chat-textarea]", text);
  await page.click("[data-testid=copilot-send-button]");
  await page.waitForFunction(
    ([selector, text]) => [...document.querySelectorAll(selector)].some((element) => element.innerText.trim() === text),
    [UI.user, text],
  );
}

async function reload(page) {
  await say(page, "hello");
  await waitForText(page, "assistant", 'You said: "hello"');
  report.steps.push("hello answered");
  await say(page, "permission x.txt");
  await page.getByRole("button", { name: "Approve" }).waitFor();
  await page.waitForSelector(UI.idle);
  report.steps.push("approval shown");
  report.before = await transcript(page);
  report.url = page.url();

  await page.reload();
  const approve = page.getByRole("button", { name: "Approve" });
  await approve.waitFor();
  await waitForText(page, "user", "permission x.txt");
  await page.waitForSelector(UI.idle);
  report.restored = await transcript(page);
  report.approval = await page.innerText(ROLES.approval);
  report.steps.push("approval shown again after the reload");

  await approve.click();
  await waitForText(page, "tool", "Successfully wrote");
  await waitForText(page, "assistant", "x.txt was written");
  await page.waitForSelector(ROLES.approval, { state: "detached" });
  await page.waitForSelector(UI.idle);
  report.steps.push("approved and finished");
}

async function cancelQuestion(page) {
  await say(page, "question");
  const cancel = page.getByRole("button", { name: "Cancel" });
  await cancel.waitFor();
  await page.waitForSelector(UI.idle);
  report.approval = await page.innerText(ROLES.approval);
  report.steps.push("question shown");
  const answered = page.waitForResponse(
    (response) => response.request().method() === "POST" && response.url().endsWith("/agent/default/run"),
  );
  await cancel.click();
  await (await answered).finished();
  await page.waitForSelector(UI.idle);
  // Let the page settle on the ended run (an error would show as the banner) before looking.
  await page.waitForLoadState("networkidle");
  report.afterCancel = await transcript(page);
  report.steps.push("question cancelled");
  if (job.stopAfterCancel) return; // the negative control: what the page showed is all it needs

  await say(page, "hello again");
  await waitForText(page, "assistant", 'You said: "hello again"');
  await page.waitForSelector(UI.idle);
  report.steps.push("next turn answered");
}

const SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><rect width="8" height="8"/></svg>';

async function attachment(page) {
  await page.waitForSelector(UI.idle);
  await page.setInputFiles("input[type=file]", { name: "diagram.svg", mimeType: "image/svg+xml", buffer: Buffer.from(SVG) });
  await say(page, "look at this");
  await waitForText(page, "assistant", 'You said: "look at this"');
  await page.waitForSelector(UI.idle);
  report.skipped = await page.innerText(ROLES.skipped);
  report.afterAttachment = await transcript(page);
  report.steps.push("attachment answered");

  await say(page, "hello again");
  await waitForText(page, "assistant", 'You said: "hello again"');
  await page.waitForSelector(UI.idle);
  report.steps.push("next turn answered");
}

async function chat(page) {
  if (!job.expectRefusal) {
    await say(page, "hello");
    await waitForText(page, "assistant", 'You said: "hello"');
    report.steps.push("hello answered");

    await say(page, "tool");
    await waitForText(page, "tool", "README.md");
    await waitForText(page, "assistant", "The workspace holds");
    report.steps.push("tool answered");
  }

  await say(page, "permission x.txt");
  const approve = page.getByRole("button", { name: "Approve" });
  await approve.waitFor();
  await page.getByRole("button", { name: "Deny" }).waitFor();
  await page.waitForSelector(UI.idle);
  report.approval = await page.innerText(ROLES.approval);
  report.steps.push("approval shown");
  const answered = page.waitForResponse(
    (response) => response.request().method() === "POST" && response.url().endsWith("/agent/default/run"),
  );
  await approve.click();

  if (job.expectRefusal) {
    // The run that carries the answer: wait until its stream has ended.
    await (await answered).finished();
    await page.waitForSelector(UI.idle);
    await page.waitForSelector(ROLES.error);
    report.steps.push("approved, answer sent");
  } else {
    await waitForText(page, "tool", "Successfully wrote");
    await waitForText(page, "assistant", "x.txt was written");
    await page.waitForSelector(ROLES.approval, { state: "detached" });
    report.steps.push("approved and finished");

    await say(page, "hello again");
    await waitForText(page, "assistant", 'You said: "hello again"');
    await page.waitForSelector(UI.idle);
    report.steps.push("second turn answered");
  }
}

const context = await launch(job, { viewport: { width: 900, height: 1000 }, locale: job.locale ?? "en-US" });
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(job.timeoutMs ?? 30_000);
  page.on("console", (message) => report.console.push({ type: message.type(), text: message.text() }));
  page.on("pageerror", (error) => report.pageErrors.push(String(error)));
  page.on("request", (request) => report.requests.push(request.url()));

  await page.goto(job.url);
  await page.waitForSelector(UI.idle);
  // CopilotChat connects while it mounts (the classic chat always, up to three
  // times; the v2 chat when the page has a thread), and a connect still under
  // way when the first message goes out replaces the chat's messages and
  // detaches that run (CopilotKit's connectAgent). Let them finish.
  await page.waitForLoadState("networkidle");
  report.steps.push("loaded");

  if (job.flow === "reload") {
    await reload(page);
  } else if (job.flow === "attachment") {
    await attachment(page);
  } else if (job.flow === "cancel-question") {
    await cancelQuestion(page);
  } else {
    await chat(page);
  }
} catch (error) {
  report.error = String(error?.stack ?? error);
} finally {
  const page = context.pages()[0];
  if (page) {
    report.transcript = await transcript(page).catch(() => []);
    report.approvalOpen = (await page.$(ROLES.approval).catch(() => null)) !== null;
    if (job.screenshot) await page.screenshot({ path: job.screenshot, fullPage: true }).catch(() => {});
  }
  await context.close();
}
process.stdout.write(`${JSON.stringify(report)}\n`);
