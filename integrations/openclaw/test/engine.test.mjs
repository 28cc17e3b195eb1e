// Unit tests of the plugin's pure logic and failure handling (run on the built dist/).
import assert from "node:assert/strict";
import { test } from "node:test";
import { compact, Failure, httpFailure } from "../dist/client.js";
import { newShared, requestBody, scope, sessionField, SpecCompact as Base, summaryTokens } from "../dist/engine.js";
import { readNote } from "../dist/readset.js";
import { readSettings } from "../dist/settings.js";
import { toWire } from "../dist/wire.js";

const quiet = { info() {}, warn() {}, error() {} };
// each test its own state (the plugin shares one per process)
class SpecCompact extends Base {
  constructor(settings, log, delegate, fetchImpl) { super(settings, log, delegate, fetchImpl, newShared()); }
}
const settings = readSettings({ serviceUrl: "http://svc:8000/" });
const history = [
  { role: "user", content: "fix parser.py; key sk-abcdefghijklmnopqrstuvwx" },
  { role: "assistant", content: [{ type: "thinking", thinking: "hmm" }, { type: "text", text: "reading" },
    { type: "toolCall", id: "c1", name: "read", arguments: { path: "parser.py" } }] },
  { role: "toolResult", toolCallId: "c1", toolName: "read", content: [{ type: "text", text: "def parse(): ..." }] },
  { role: "toolResult", toolCallId: "orphan", toolName: "read", content: [{ type: "text", text: "lost" }] },
];

function fakeFetch(answers, seen = []) {
  return async (url, init) => {
    seen.push({ url, body: JSON.parse(init.body), headers: init.headers, signal: init.signal });
    const a = answers.shift();
    if (a instanceof Error) throw a;
    if (a === "hang") return new Promise((_, reject) => init.signal.addEventListener("abort", () => reject(init.signal.reason)));
    return new Response(typeof a.body === "string" ? a.body : JSON.stringify(a.body), { status: a.status ?? 200 });
  };
}

test("settings: defaults, trimming, the environment's API key", () => {
  assert.equal(settings.serviceUrl, "http://svc:8000");
  assert.equal(settings.method, "speccompact");
  assert.equal(readSettings({ timeoutMs: "5" }).timeoutMs, 120000);
  assert.equal(readSettings({}, { SGL_SPECCOMPACT_API_KEY: "k" }).apiKey, "k");
});

test("wire: tool calls and results keep their pairing, orphans and thinking dropped, secrets redacted", () => {
  const wire = toWire(history);
  assert.equal(wire.length, 3);
  assert.deepEqual(wire[1].tool_calls, [{ id: "c1", type: "function", function: { name: "read", arguments: '{"path":"parser.py"}' } }]);
  assert.equal(wire[1].content, "reading");
  assert.deepEqual(wire[2], { role: "tool", tool_call_id: "c1", content: "def parse(): ..." });
  assert.ok(!JSON.stringify(wire).includes("sk-abc"));
  assert.equal(history[0].content.includes("sk-abc"), true); // the input is not modified
});

test("request body: focus, budget, session, previous summary", () => {
  const body = requestBody(settings, history, { sessionId: "s-1", tokenBudget: 4096, customInstructions: "  the lexer ", force: true }, "## Goal\n- x");
  assert.equal(body.focus, "the lexer");
  assert.deepEqual(body.config, { max_summary_tokens: 1024, agent_context_tokens: 4096 });
  assert.equal(body.session, "s-1");
  assert.equal(body.previous_summary, "## Goal\n- x");
  assert.equal(summaryTokens(1_000_000, 2048), 2048);
  assert.equal(summaryTokens(100, 2048), 256);
  assert.equal(sessionField("a b"), undefined);
  const quietBody = requestBody(readSettings({ sendSession: false }), history, { sessionId: "s-1", force: false }, undefined);
  assert.equal("session" in quietBody || "focus" in quietBody || "previous_summary" in quietBody, false);
});

test("client: statuses map to failures with Hermes's cooldowns", async () => {
  assert.equal(httpFailure(504, {}).kind, "timeout");
  assert.equal(httpFailure(401, {}).cooldownS(0), 600);
  assert.equal(new Failure("timeout", "x").cooldownS(3), 900);
  const call = (answer) => compact("http://svc", { messages: [] }, { timeoutMs: 1000, fetchImpl: fakeFetch([answer]) });
  await assert.rejects(call({ status: 500, body: { error: { type: "internal", message: "boom" } } }), (e) => e.kind === "http_error" && e.message.includes("boom"));
  await assert.rejects(call({ body: "<html>" }), (e) => e.kind === "bad_response");
  await assert.rejects(call({ body: { summary: "## Goal", truncated: true } }), (e) => e.kind === "truncated");
  await assert.rejects(call(new TypeError("fetch failed")), (e) => e.kind === "unreachable");
  await assert.rejects(compact("http://svc", {}, { timeoutMs: 50, fetchImpl: fakeFetch(["hang"]) }), (e) => e.kind === "timeout");
  assert.equal((await call({ body: { summary: " ## Goal\n- a " } })).summary, "## Goal\n- a");
});

test("provider: a failure throws (OpenClaw's built-in summarizer takes over) and starts a cooldown", async () => {
  const seen = [];
  const sc = new SpecCompact(settings, quiet, undefined, fakeFetch([{ status: 503, body: {} }, { body: { summary: "## Goal\n- b" } }], seen));
  await assert.rejects(sc.summarize({ messages: history }), /built-in summarizer/);
  await assert.rejects(sc.summarize({ messages: history }), /cooling down/); // no second request
  assert.equal(seen.length, 1);
  // OpenClaw forces its pre-turn compactions too: force does not lift the pause, its end does
  await assert.rejects(scope.run({ sessionId: "", force: true }, () => sc.summarize({ messages: history })), /cooling down/);
  sc.state("").cooldownUntil = Date.now() - 1;
  const out = await sc.summarize({ messages: history });
  assert.equal(out, "## Goal\n- b");
  assert.equal(sc.state("").failuresInARow, 0);
});

test("provider: OpenClaw's abort cancels the request and is not a failure", async () => {
  const ctrl = new AbortController();
  const seen = [];
  const sc = new SpecCompact(settings, quiet, undefined, fakeFetch(["hang"], seen));
  const pending = sc.summarize({ messages: history, signal: ctrl.signal });
  setTimeout(() => ctrl.abort(new Error("stop")), 20);
  await assert.rejects(pending, /stop/);
  assert.equal(seen[0].signal.aborted, true);
  assert.equal(sc.state("").failuresInARow, 0);
});

test("provider: the previous summary is its own, and forgotten when OpenClaw has none", async () => {
  const seen = [];
  const sc = new SpecCompact(settings, quiet, undefined,
    fakeFetch([{ body: { summary: "## Goal\n- one" } }, { body: { summary: "## Goal\n- two" } }, { body: { summary: "## Goal\n- three" } }], seen));
  await sc.summarize({ messages: history });
  await sc.summarize({ messages: history, previousSummary: "## Goal\n- one\n\n## Tool failures\n..." });
  await sc.summarize({ messages: history });
  assert.equal("previous_summary" in seen[0].body, false);
  assert.equal(seen[1].body.previous_summary, "## Goal\n- one");
  assert.equal("previous_summary" in seen[2].body, false);
});

test("provider: the read set reaches the agent after the summary, and never goes back as the previous summary", async () => {
  const ledger = "## Exact Ledger\nCopied verbatim from the history, no model: mN = message N; done = already carried out, do not repeat.\n- m1 read `src/io.py` via `read`";
  const readSet = [{ path: "src/io.py", last_read: 5, changed_after: false, changed_at: null },
                   { path: "setup.cfg", last_read: 2, changed_after: true, changed_at: 7 },
                   { path: "notes.md", last_read: null, changed_after: true, changed_at: 3 }];
  const seen = [];
  const sc = new SpecCompact(settings, quiet, undefined, fakeFetch([
    { body: { summary: `## Goal\n- fix io\n\n${ledger}`, ledger: { read_set: readSet } } },
    { body: { summary: "## Goal\n- two", ledger: null } }], seen));
  const out = await sc.summarize({ messages: history });
  assert.equal(out, `## Goal\n- fix io\n\n${ledger}\nAlready read, unchanged since: \`src/io.py\` (m5)\n` +
    "Read, then changed (read again before relying on it): `setup.cfg` (read m2, changed m7)\n");
  const again = await sc.summarize({ messages: history, previousSummary: out });
  assert.equal(seen[1].body.previous_summary.includes("Already read"), false); // the service's own summary goes back
  assert.equal(again, "## Goal\n- two"); // no ledger, no read set: the summary as it came
  assert.deepEqual(readNote({}), []);
});

test("engine: delegates to OpenClaw's runtime inside the call scope, never throws, counts ineffective runs", async () => {
  let inside;
  const results = [{ ok: true, compacted: true, result: { tokensBefore: 100, tokensAfter: 100 } },
                   { ok: true, compacted: true, result: { tokensBefore: 100, tokensAfter: 100 } }];
  // OpenClaw may run the summarization outside the engine's async scope: the only call in progress is used
  let outside;
  const sc = new SpecCompact(settings, quiet, async () => {
    inside = scope.getStore();
    await new Promise((resolve) => setImmediate(() => { outside = scope.run(undefined, () => sc.currentCall()); resolve(); }));
    return results.shift() ?? Promise.reject(new Error("boom"));
  });
  const engine = sc.engine();
  assert.equal(engine.info.ownsCompaction, false);
  await engine.compact({ sessionId: "s", sessionKey: "k", tokenBudget: 8000, customInstructions: "lexer" });
  assert.deepEqual(inside, { sessionId: "s", tokenBudget: 8000, customInstructions: "lexer", force: false });
  assert.deepEqual(outside, inside);
  assert.equal(sc.currentCall(), undefined); // nothing in progress any more
  // a second registration in the same process sees the same calls and sessions
  const shared = newShared();
  const [a, b] = [new Base(settings, quiet, undefined, undefined, shared), new Base(settings, quiet, undefined, undefined, shared)];
  a.state("x").cooldownUntil = Date.now() + 60_000;
  assert.match(b.blocked(b.state("x")), /cooling down/);
  await engine.compact({ sessionId: "s", sessionKey: "k" });
  assert.match(sc.blocked(sc.state("s")), /freed nothing/);
  const failed = await engine.compact({ sessionId: "s", sessionKey: "k", force: true });
  assert.deepEqual([failed.ok, failed.compacted], [false, false]);
  assert.deepEqual([await engine.commitTurn({ advancementKey: "a" }), await engine.commitTurn({ advancementKey: "a" })],
                   [{ status: "committed" }, { status: "duplicate" }]);
});
