// The web console in headless Chromium, driven by Playwright (playwright-core), against a
// `metaforge up` the Rust test started. Every step prints `ok - <step>` or `not ok - <step>: why`,
// every page is screenshotted into $ARTIFACTS and checked with axe-core (no serious or critical
// violation may remain), and the last line is the summary. Exit 1 when any step failed.
"use strict";
const { chromium } = require("playwright-core");
const AxeBuilder = require("@axe-core/playwright").default;
const fs = require("fs");
const path = require("path");

const BASE = process.env.BASE;
const KEY = process.env.KEY;
const SECOND_KEY = process.env.SECOND_KEY;
const ARTIFACTS = process.env.ARTIFACTS;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const TIMEOUT = 30000;

const results = [];
const axeResults = [];
let shot = 0;

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function api(method, route, body) {
  const response = await fetch(BASE + route, {
    method,
    headers: { "X-API-Key": KEY, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { json = text; }
  return { status: response.status, body: json };
}

async function capture(page, name) {
  shot += 1;
  const file = path.join(ARTIFACTS, String(shot).padStart(2, "0") + "-" + name + ".png");
  await page.screenshot({ path: file, fullPage: true });
  console.log("screenshot " + path.basename(file));
}

async function axe(page, name) {
  const result = await new AxeBuilder({ page }).analyze();
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  axeResults.push({ page: name, serious_or_critical: bad.length, violations: result.violations.length, passes: result.passes.length });
  console.log("axe " + name + ": " + bad.length + " serious/critical, " + result.violations.length + " violations in all, " + result.passes.length + " rules passed");
  for (const v of result.violations) {
    console.log("  axe " + v.impact + " " + v.id + ": " + v.help + " (" + v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join("; ") + ")");
  }
  check(bad.length === 0, name + ": axe found " + bad.map((v) => v.id).join(", "));
}

async function look(page, name) {
  await capture(page, name);
  await axe(page, name);
}

async function step(name, body) {
  try {
    await body();
    results.push({ name, ok: true });
    console.log("ok - " + name);
  } catch (e) {
    results.push({ name, ok: false });
    console.log("not ok - " + name + ": " + (e && e.stack ? e.stack.split("\n").slice(0, 3).join(" | ") : e));
  }
}

async function signIn(page, key) {
  await page.goto(BASE + "/approvals");
  check(page.url().includes("/sign-in"), "an unsigned visitor is sent to the sign-in form, got " + page.url());
  await page.fill("#key", key);
  await Promise.all([page.waitForURL("**/approvals"), page.click("form.card button[type=submit]")]);
}

async function propose(loads) {
  const answer = await api("POST", "/v1/design-flows/propose", {
    template: "mech_v1",
    operations: [{ op: "add_deliverable", phase: "design", value: "test_plan", rationale: "load-tested before release" }],
    manufacturing_context: { route: "vendor" },
    target_maturity: "sim_validated",
    loads_and_use: loads,
  });
  check(answer.status === 201, "propose answered " + answer.status + " " + JSON.stringify(answer.body));
  return answer.body;
}

(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync"],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  context.setDefaultTimeout(TIMEOUT);
  const page = await context.newPage();
  // A second person with JavaScript off: reading and deciding must work without it.
  const plain = await browser.newContext({ javaScriptEnabled: false, viewport: { width: 1280, height: 900 } });
  plain.setDefaultTimeout(TIMEOUT);
  const plainPage = await plain.newPage();

  await step("sign in with a key: the session is the key's identity", async () => {
    await page.goto(BASE + "/sign-in");
    await look(page, "sign-in");
    await page.fill("#key", "sk-not-a-key-0000");
    await page.click("form.card button[type=submit]");
    const refusal = await page.textContent("[role=alert]");
    check(refusal.includes("not one of this gateway's keys"), "a wrong key is refused: " + refusal);
    await signIn(page, KEY);
    check((await page.textContent("#identity")) === "ops", "signed in as ops");
    await signIn(plainPage, SECOND_KEY);
    check((await plainPage.textContent("#identity")) === "alice", "the second person is alice");
  });

  let proposal = null;
  await step("a flow proposed over the API is approved on the page by the signed-in person", async () => {
    proposal = await propose("20 kg shelf");
    await page.goto(BASE + "/approvals");
    const item = page.locator("#a-" + proposal.approvalId);
    await item.waitFor();
    check((await item.textContent()).includes("load-tested before release"), "the rationale of each operation is shown");
    await look(page, "approvals-queue");
    // alice's page (no JavaScript) is loaded now and goes stale when ops decides.
    await plainPage.goto(BASE + "/approvals");
    await plainPage.locator("#a-" + proposal.approvalId).waitFor();
    await item.locator("input[name=note]").fill("checked on the page");
    await Promise.all([page.waitForURL("**/approvals"), item.locator("button.approve").click()]);
    const row = page.locator("#d-" + proposal.approvalId);
    await row.waitFor();
    check((await row.textContent()).includes("ops"), "the decided row names the approver: " + (await row.textContent()));
    const version = await api("GET", "/v1/design-flows/versions/" + proposal.version_id);
    check(version.body.version.status === "approved", "the version is approved: " + JSON.stringify(version.body.version.status));
    check(version.body.version.approver === "ops", "its approver is the signed-in identity: " + version.body.version.approver);
    await capture(page, "approvals-decided");
  });

  await step("a second decision shows who already decided (409), without JavaScript", async () => {
    check(proposal !== null, "needs the proposal of the step before");
    const item = plainPage.locator("#a-" + proposal.approvalId);
    const [response] = await Promise.all([plainPage.waitForNavigation(), item.locator("button.reject").click()]);
    check(response.status() === 409, "answered " + response.status());
    const message = await plainPage.textContent("[role=alert]");
    check(message.includes("Already decided by ops"), "the 409 names the approver: " + message);
    await capture(plainPage, "already-decided-409");
    // axe runs in the page, so the same answer is checked in the JavaScript context too.
    await page.goto(BASE + "/approvals");
    await Promise.all([
      page.waitForNavigation(),
      page.evaluate((id) => {
        const form = document.createElement("form");
        form.method = "post";
        form.action = "/approvals/" + id;
        for (const [name, value] of [["csrf", document.body.dataset.csrf], ["decision", "reject"]]) {
          const input = document.createElement("input");
          input.type = "hidden";
          input.name = name;
          input.value = value;
          form.appendChild(input);
        }
        document.body.appendChild(form);
        form.submit();
      }, proposal.approvalId),
    ]);
    check((await page.textContent("[role=alert]")).includes("Already decided by ops"), "the 409 page in the JavaScript context");
    await axe(page, "already-decided-409");
    const hold = await api("GET", "/v1/approvals/" + proposal.approvalId);
    check(hold.body.status === "approved" && hold.body.approver === "ops", "the first decision stands: " + JSON.stringify(hold.body));
  });

  await step("a forged post without the CSRF token is refused and changes nothing", async () => {
    const other = await propose("12 kg shelf");
    await page.goto(BASE + "/approvals");
    const status = await page.evaluate(async (id) => {
      const r = await fetch("/approvals/" + id, { method: "POST", body: new URLSearchParams({ decision: "approve" }) });
      return r.status;
    }, other.approvalId);
    check(status === 403, "a post without the token answered " + status);
    const forgedToken = await page.evaluate(async (id) => {
      const r = await fetch("/approvals/" + id, { method: "POST", body: new URLSearchParams({ decision: "approve", csrf: "0".repeat(64) }) });
      return r.status;
    }, other.approvalId);
    check(forgedToken === 403, "a post with another token answered " + forgedToken);
    const hold = await api("GET", "/v1/approvals/" + other.approvalId);
    check(hold.body.status === "awaiting_approval", "the hold is still waiting: " + hold.body.status);
  });

  await step("a tool call held by a chat turn appears live in the queue, is approved there, and the turn continues", async () => {
    await page.goto(BASE + "/chat");
    await page.fill("#title", "Shelf bracket");
    await Promise.all([page.waitForURL(/\/chat\/[0-9a-f-]+$/), page.click("form[action='/chat'] button")]);
    const queue = await context.newPage();
    await queue.goto(BASE + "/approvals");
    const before = await queue.locator("li.item[data-kind=tool_call]").count();
    check(before === 0, "no tool call waits before the turn");
    await page.fill("#content", "record the bracket drawing in the twin");
    await page.click("#post button");
    await page.locator(".event.held").waitFor();
    check((await page.textContent(".event.held")).includes("twin.commit_work_product"), "the held call is shown inline");
    await capture(page, "chat-held-call");
    // The queue tab was not reloaded: its script brings the new hold in.
    const held = queue.locator("li.item[data-kind=tool_call]");
    await held.waitFor();
    check(queue.url().endsWith("/approvals"), "the queue page stayed where it was");
    check((await held.textContent()).includes("twin.commit_work_product"), "the queue shows the held tool");
    await look(queue, "approvals-live-tool-call");
    await Promise.all([queue.waitForURL("**/approvals"), held.locator("button.approve").click()]);
    await page.locator(".msg.assistant").waitFor();
    await page.locator(".event.done").waitFor();
    const reply = await page.textContent(".msg.assistant");
    check(reply.includes("recorded in the twin, after your approval"), "the turn continued to its reply: " + reply);
    await look(page, "chat-turn-done");
    const all = await api("GET", "/v1/approvals?status=all");
    const call = all.body.approvals.find((a) => a.tool === "twin.commit_work_product");
    check(call && call.status === "approved" && call.approver === "ops", "the held call was approved by ops: " + JSON.stringify(call));
    await queue.close();
  });

  await step("a gate is answered on the run's flow-state graph", async () => {
    const started = await api("POST", "/v1/runs", { template_id: "design_v1" });
    check(started.status === 201, "run start answered " + started.status + " " + JSON.stringify(started.body));
    const run = started.body.id;
    await page.goto(BASE + "/runs/" + run);
    // The page follows the run's notices: the gate card appears without a reload.
    const card = page.locator("li.node[data-phase=feasibility] .gatecard");
    await card.waitFor();
    await look(page, "run-graph-gate");
    await card.locator("textarea[name=reason]").fill("feasible as drawn");
    await Promise.all([page.waitForURL("**/runs/" + run), card.locator("button.approve").click()]);
    await page.locator("li.node[data-phase=feasibility].s-passed").waitFor();
    await capture(page, "run-graph-after-gate");
    const all = await api("GET", "/v1/approvals?status=all");
    const gate = all.body.approvals.find((a) => a.kind === "gate" && a.arguments.run_id === run && a.arguments.phase === "feasibility");
    check(gate && gate.status === "approved" && gate.approver === "ops", "the gate's hold records ops: " + JSON.stringify(gate));
    await api("POST", "/v1/runs/" + run + "/cancel", { reason: "browser test done" });
  });

  await step("runs, flows, validation, propose, usage and chat pages read and pass axe", async () => {
    await page.goto(BASE + "/runs");
    await look(page, "runs");
    await page.goto(BASE + "/flows");
    await look(page, "flows");
    await page.goto(BASE + "/flows/templates/mech_v1");
    await look(page, "flow-template");
    await page.goto(BASE + "/flows/validate?template=mech_v1");
    const text = await page.inputValue("#flow");
    await page.fill("#flow", text.replace(/required_deliverables: \[[^\]]*\]/g, "required_deliverables: []").replace("auto_approve: false", "auto_approve: true"));
    await page.click("form[action='/flows/validate'] button");
    await page.locator("section[aria-label=Result]").waitFor();
    const violations = await page.locator("ul.violations li").count();
    check(violations >= 3, "every violation of the pasted edit is listed, got " + violations);
    await look(page, "flow-validate");
    await page.goto(BASE + "/flows/propose");
    await look(page, "flow-propose");
    await page.goto(BASE + "/usage");
    check((await page.textContent("main")).includes("By run"), "usage by run is listed");
    await look(page, "usage");
    await page.goto(BASE + "/chat");
    await look(page, "chat-threads");
  });

  await step("signing out ends the session", async () => {
    await page.goto(BASE + "/approvals");
    await Promise.all([page.waitForURL("**/sign-in"), page.click("form[action='/sign-out'] button")]);
    await page.goto(BASE + "/approvals");
    check(page.url().includes("/sign-in"), "after sign-out the queue asks for sign-in again: " + page.url());
  });

  await browser.close();
  fs.writeFileSync(path.join(ARTIFACTS, "axe.json"), JSON.stringify(axeResults, null, 2));
  const failed = results.filter((r) => !r.ok).length;
  console.log("console browser tests: " + (results.length - failed) + " passed, " + failed + " failed; " + shot + " screenshots in " + ARTIFACTS + "; axe: " + axeResults.length + " pages, " + axeResults.reduce((n, r) => n + r.serious_or_critical, 0) + " serious/critical");
  process.exit(failed === 0 ? 0 : 1);
})().catch((e) => {
  console.log("not ok - the browser run: " + e);
  process.exit(1);
});
