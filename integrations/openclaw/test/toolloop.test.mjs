// A 40-file tool loop in a scripted host modelled on openclaw 2026.9.6's embedded runner (read from its dist/):
// the mid-turn precheck, which compacts through the engine when the prompt would no longer fit, and afterTurn()
// with the whole transcript before each model request. OpenClaw makes that afterTurn() call per request only
// for engines that own compaction; for this one it comes after a completed turn, so the prepare checks here
// cover the engine's side only. The scripted model refuses any prompt over its window; a fake service records
// prepares and reports reuse. The real OpenClaw runs a 40-file loop in tests/integrations/test_openclaw_e2e.py.
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { newShared, SpecCompact } from "../dist/engine.js";
import { readSettings } from "../dist/settings.js";

const WINDOW = 64_000; // the model's window and OpenClaw's token budget (tokens)
const RESERVE = 4_000; // what the precheck keeps free for the reply (tokens)
const FILES = 40; // files read in the one request
const FILE_CHARS = 20_000; // characters of one file (about 5,000 tokens)
const KEEP = 20_000; // OpenClaw's keepRecentTokens default
const quiet = { info() {}, warn() {}, error() {} };

/** The model's count of a prompt: 4 characters a token over the messages as JSON (more than the engine's estimate). */
const promptTokens = (messages) => Math.ceil(JSON.stringify(messages).length / 4);

/** A fake service: answers prepares 202, compactions with a summary and the longest prepared prefix reused. */
function fakeService({ down = false } = {}) {
  const svc = { prepares: [], compacts: [] };
  const sameParams = (a, b) => JSON.stringify([a.previous_summary, a.config]) === JSON.stringify([b.previous_summary, b.config]);
  svc.fetch = async (_url, init) => {
    const body = JSON.parse(init.body);
    if (down) throw new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } });
    if (body.mode === "prepare") {
      svc.prepares.push(body);
      return new Response(JSON.stringify({ session: body.session, status: "preparing" }), { status: 202 });
    }
    const reused = Math.max(0, ...svc.prepares.filter((p) => p.session === body.session && sameParams(p, body)
      && JSON.stringify(body.messages.slice(0, p.messages.length)) === JSON.stringify(p.messages)).map((p) => p.messages.length));
    svc.compacts.push({ body, reused });
    const summary = `## Goal\n- read every file (compaction ${svc.compacts.length})`;
    return new Response(JSON.stringify({ summary, method: "speccompact", session: { reused_messages: reused } }), { status: 200 });
  };
  return svc;
}

/** OpenClaw's runtime compaction, as delegateCompactionToRuntime runs it: summarize all but the kept tail. */
function runtimeCompaction(host, provider) {
  return async () => {
    const before = promptTokens(host.transcript);
    const start = host.transcript[0].role === "compactionSummary" ? 1 : 0;
    let cut = host.transcript.length; // the host's own cut: the last KEEP tokens as the model counts them, whole groups
    while (cut > start && promptTokens(host.transcript.slice(cut - 1)) <= KEEP) cut -= 1;
    while (cut > start && host.transcript[cut].role === "toolResult") cut -= 1;
    const toSummarize = host.transcript.slice(start, cut);
    const kept = host.transcript.slice(cut);
    let summary;
    try {
      summary = await provider.summarize({ messages: toSummarize, previousSummary: host.previousSummary });
    } catch {
      summary = "built-in summary"; // OpenClaw falls back to its own summarizer
      host.builtin += 1;
    }
    host.previousSummary = summary;
    host.transcript = [{ role: "compactionSummary", summary, content: summary }, ...kept];
    host.compactions += 1;
    return { ok: true, compacted: true, result: { tokensBefore: before, tokensAfter: promptTokens(host.transcript) } };
  };
}

/** One request that the model turns into FILES reads; what the model refused and what the host compacted. */
async function toolLoop({ service, midTurnPrecheck = true, shared = newShared() }) {
  const host = { transcript: [{ role: "user", content: "Read loop0.txt to loop39.txt one by one." }], previousSummary: undefined,
                 compactions: 0, builtin: 0, refused: 0, requests: 0, compactedAt: [], preparesAt: [] };
  let sc;
  const delegate = (params) => runtimeCompaction(host, sc.provider())(params);
  sc = new SpecCompact(readSettings({ serviceUrl: "http://svc" }, {}, { keepRecentTokens: KEEP }), quiet, delegate, service.fetch, shared);
  const engine = sc.engine();
  const compact = async () => {
    host.compactedAt.push(promptTokens(host.transcript));
    await engine.compact({ sessionId: "loop-1", sessionKey: "k", tokenBudget: WINDOW, force: true });
  };
  for (let read = 0; read <= FILES;) {
    await engine.afterTurn({ sessionId: "loop-1", messages: host.transcript, tokenBudget: WINDOW });
    await new Promise((resolve) => setImmediate(resolve)); // the background prepare's request goes out
    host.preparesAt.push(service.prepares.length);
    if (midTurnPrecheck && host.transcript.at(-1).role === "toolResult" && promptTokens(host.transcript) + RESERVE > WINDOW) {
      await compact(); // the precheck's recovery: compact, then submit
    }
    host.requests += 1;
    if (promptTokens(host.transcript) > WINDOW) { // refused for length; OpenClaw's overflow recovery compacts
      host.refused += 1;
      await compact();
      continue;
    }
    if (read === FILES) break; // the model answers "done"
    const id = `read_${read}`;
    host.transcript.push({ role: "assistant", content: [{ type: "toolCall", id, name: "read", arguments: { path: `loop${read}.txt` } }] },
                         { role: "toolResult", toolCallId: id, toolName: "read",
                           content: [{ type: "text", text: `LOOP-FILE-${read}\n` + `row ${read} `.repeat(FILE_CHARS / 8) }] });
    read += 1;
  }
  return { host, sc };
}

test("tool loop: 40 files, 0 requests refused for length, every compaction finds a prepared prefix", async () => {
  const service = fakeService();
  const { host, sc } = await toolLoop({ service });
  assert.equal(host.refused, 0);
  assert.ok(host.compactions >= 3, `compactions: ${host.compactions}`);
  assert.ok(host.compactedAt.every((t) => t <= WINDOW)); // before the window, never after a refusal
  assert.equal(service.compacts.length, host.compactions);
  assert.ok(service.compacts.every((c) => c.reused > 0), JSON.stringify(service.compacts.map((c) => c.reused)));
  assert.ok(service.prepares.length >= 2 * host.compactions); // rolling: more than one per compaction
  assert.ok(service.prepares.length < host.requests); // but not one per request
  // the summary entry is not a message the compaction summarizes: never in a prepare
  assert.ok(service.prepares.every((p) => p.session === "loop-1" && !JSON.stringify(p.messages).includes("[compactionSummary]")));
  assert.equal(sc.state("loop-1").preparesSent, service.prepares.length);
});

test("tool loop: without the mid-turn precheck (safeguard mode) the scripted window refuses requests", async () => {
  const { host } = await toolLoop({ service: fakeService(), midTurnPrecheck: false });
  assert.ok(host.refused > 0); // what the precheck prevents: the same loop goes over the window
});

test("tool loop: with the service down OpenClaw's summarizer takes each compaction, the window still holds", async () => {
  const service = fakeService({ down: true });
  const { host, sc } = await toolLoop({ service });
  assert.equal(host.refused, 0);
  assert.equal(host.builtin, host.compactions);
  assert.match(sc.blocked(sc.state("loop-1")), /cooling down/);
  assert.equal(sc.state("loop-1").failuresInARow, 1); // asked once, then paused
});

test("pause: a failure is kept under the state folder and honoured by the next process", async () => {
  const path = join(mkdtempSync(join(tmpdir(), "speccompact-")), "speccompact", "pause.json");
  const down = fakeService({ down: true });
  const first = new SpecCompact(readSettings({ serviceUrl: "http://svc" }), quiet, undefined, down.fetch, newShared(path));
  await assert.rejects(first.summarize({ messages: [{ role: "user", content: "hi" }] }), /built-in summarizer/);
  let asked = 0;
  const counting = async (...args) => { asked += 1; return down.fetch(...args); };
  const next = new SpecCompact(readSettings({ serviceUrl: "http://svc" }), quiet, undefined, counting, newShared(path));
  await assert.rejects(next.summarize({ messages: [{ role: "user", content: "hi" }] }), /cooling down/);
  assert.equal(asked, 0);
  // another service URL is not paused; a success clears the stored pause
  const elsewhere = new SpecCompact(readSettings({ serviceUrl: "http://other" }), quiet, undefined, fakeService().fetch, newShared(path));
  assert.equal(elsewhere.blocked(elsewhere.state("")), undefined);
  next.state("").cooldownUntil = 0;
  const up = fakeService();
  const healed = new SpecCompact(readSettings({ serviceUrl: "http://svc" }), quiet, undefined, up.fetch, newShared(path));
  healed.state("").cooldownUntil = 0;
  await healed.summarize({ messages: [{ role: "user", content: "hi" }] });
  const later = new SpecCompact(readSettings({ serviceUrl: "http://svc" }), quiet, undefined, up.fetch, newShared(path));
  assert.equal(later.blocked(later.state("")), undefined);
});

test("settled prefix: after the latest summary, before the kept tail, never a call without its result", async () => {
  const { settledPrefix } = await import("../dist/ahead.js");
  const call = (id) => ({ role: "assistant", content: [{ type: "toolCall", id, name: "read", arguments: {} }] });
  const result = (id, n) => ({ role: "toolResult", toolCallId: id, content: [{ type: "text", text: "x".repeat(n) }] });
  const ms = [{ role: "compactionSummary", content: "old" }, { role: "user", content: "go" },
              call("a"), result("a", 4000), call("b"), result("b", 400)];
  // the last 100 tokens hold b's result alone: the raw cut falls between b's call and its result
  assert.deepEqual(settledPrefix(ms, 100).map((m) => m.role), ["user", "assistant", "toolResult"]);
  assert.deepEqual(settledPrefix(ms, 10_000), []);
  assert.deepEqual(settledPrefix(ms, 0).length, 5); // the summary entry is never part of it
});
