/**
 * The `speccompact` context engine and compaction provider.
 *
 * OpenClaw keeps what it is good at: choosing what to summarize (its head and
 * tail rules, tool calls never split from their results), writing the
 * compaction entry, retrying after overflow. The engine declares
 * `ownsCompaction: false` and delegates `compact()` to OpenClaw's runtime,
 * whose summarization step calls the registered compaction provider: that
 * provider sends the messages to the service. The per-call facts only the
 * engine sees (session id, token budget, the user's `/compact` focus, force)
 * reach the provider through an AsyncLocalStorage scope.
 *
 * Failure: when the service is down, slow, answers 4xx/5xx or no complete
 * summary, the provider throws and OpenClaw falls back to its own built-in
 * summarizer, exactly as with no plugin. Nothing is thrown into the agent
 * loop. After a failure the service is skipped for a cooldown (as the Hermes
 * plugin does), kept in a file under OpenClaw's state folder so the next
 * `openclaw agent --local` process honours it too (`pause.ts`); after
 * `maxIneffective` compactions in a row that did not shrink the context, it
 * is skipped until one (by OpenClaw's summarizer) does.
 *
 * Ahead of time: `afterTurn()` sends the settled part of the transcript as a
 * prepare (`ahead.ts`), in the background: it never delays the agent.
 * OpenClaw 2026.9.6 calls it before each model request of a tool loop only
 * for engines that own compaction; for this one, after a completed turn.
 */

import { AsyncLocalStorage } from "node:async_hooks";
import { join } from "node:path";
import { estimateTokens, settledPrefix, shouldPrepare } from "./ahead.js";
import { compact as postCompact, Failure, prepare as postPrepare, type Reply } from "./client.js";
import { PAUSE_FILE, PauseFile, pauseKey, stateDir } from "./pause.js";
import { withReadNote } from "./readset.js";
import type { Settings } from "./settings.js";
import type { AfterTurnParams, CompactParams, CompactResult, CompactionProvider, ContextEngine, PluginLogger, SummarizeParams } from "./types.js";
import { redact, toWire } from "./wire.js";

export { estimateTokens } from "./ahead.js";
export const ENGINE_ID = "speccompact";
export const FOCUS_MAX_CHARS = 800; // OpenClaw's own bound on operator focus (code points)
export const SESSION_MAX_CHARS = 256; // the service's bound on `session`
const SUMMARY_SHARE = 0.25; // at most this share of the token budget goes to the summary
const SUMMARY_FLOOR = 256; // never ask for a smaller summary than this (tokens)

/** What one `compact()` call knows that the summarization step does not. */
export type CallScope = {
  /** OpenClaw session id */
  sessionId: string;
  /** the model's context budget for this compaction (tokens) */
  tokenBudget?: number;
  /** the text after `/compact`, raw */
  customInstructions?: string;
  /** OpenClaw requires this compaction (`/compact`, pre-turn, overflow retry) */
  force: boolean;
};

/** Per-session memory between compactions. */
export type SessionState = {
  /** the last summary the service wrote (without OpenClaw's appended sections) */
  previousSummary?: string;
  /** Date.now() before which automatic compaction skips the service (ms) */
  cooldownUntil: number;
  /** consecutive timeouts (cooldown ladder step) */
  timeoutsInARow: number;
  /** consecutive failures of any kind */
  failuresInARow: number;
  /** automatic compactions in a row that did not reduce the context */
  ineffectiveInARow: number;
  /** estimated tokens of the prefix the latest prepare sent (0: none since the last compaction) */
  preparedTokens: number;
  /** a prepare request is on its way */
  preparing: boolean;
  /** prepares sent for this session */
  preparesSent: number;
  /** what happened last, for logs and tests */
  last: Record<string, unknown>;
};

export const scope = new AsyncLocalStorage<CallScope>();

/**
 * `max_summary_tokens` for a token budget: a quarter of it, at least 256, at most the configured cap.
 *
 * @example
 *   summaryTokens(4096, 2048)   // 1024
 *   summaryTokens(undefined, 2048)  // 2048
 */
export function summaryTokens(tokenBudget: number | undefined, cap: number): number {
  if (!tokenBudget || !Number.isFinite(tokenBudget) || tokenBudget <= 0) return cap;
  return Math.min(cap, Math.max(SUMMARY_FLOOR, Math.floor(tokenBudget * SUMMARY_SHARE)));
}

/**
 * A session id the service accepts as `session` (printable ASCII, bounded), or undefined.
 *
 * @example
 *   sessionField("0193-ab")  // "0193-ab"
 *   sessionField("naïve")    // undefined
 */
export function sessionField(id: string | undefined): string | undefined {
  if (!id || id.length > SESSION_MAX_CHARS || !/^[\x21-\x7e]+$/.test(id)) return undefined;
  return id;
}

/** The `POST /v1/compact` body for one summarization step (pure). */
export function requestBody(settings: Settings, messages: readonly unknown[], call: CallScope | undefined,
                            previousSummary: string | undefined): Record<string, unknown> {
  const body: Record<string, unknown> = {
    messages: toWire(messages),
    method: settings.method,
    source_judge: settings.sourceJudge,
    config: { max_summary_tokens: summaryTokens(call?.tokenBudget, settings.maxSummaryTokens),
              ...(call?.tokenBudget ? { agent_context_tokens: Math.floor(call.tokenBudget) } : {}) },
  };
  if (previousSummary?.trim()) body.previous_summary = redact(previousSummary.trim());
  const focus = call?.customInstructions?.trim();
  if (focus) body.focus = redact(Array.from(focus).slice(0, FOCUS_MAX_CHARS).join(""));
  const session = settings.sendSession ? sessionField(call?.sessionId) : undefined;
  if (session) body.session = session;
  return body;
}

function freshState(): SessionState {
  return { cooldownUntil: 0, timeoutsInARow: 0, failuresInARow: 0, ineffectiveInARow: 0, preparedTokens: 0,
           preparing: false, preparesSent: 0, last: {} };
}

/** What the engine and the provider share. */
export type Shared = {
  /** per-session memory, by OpenClaw session id */
  sessions: Map<string, SessionState>;
  /** the `compact()` calls in progress (OpenClaw may run the summarization outside their async scope) */
  inflight: Set<CallScope>;
  /** advancement keys of committed turns */
  committed: Set<string>;
  /** the service's pauses, shared with other OpenClaw processes */
  pauses: PauseFile;
  /** the service took (true) or refused (false) a prepare; undefined: not asked yet */
  prepareSupported?: boolean;
};

/** Fresh process state; `pausePath` undefined keeps pauses in memory only. */
export function newShared(pausePath?: string): Shared {
  return { sessions: new Map(), inflight: new Set(), committed: new Set(), pauses: new PauseFile(pausePath) };
}

// OpenClaw may load this module more than once in a process (the compaction provider can come
// from another plugin registry than the engine), so the state lives on globalThis, under a
// registered symbol that every copy of the module finds.
const SHARED_KEY = Symbol.for("sgl-speccompact.openclaw.shared");
const PROCESS_SHARED: Shared = ((globalThis as Record<symbol, unknown>)[SHARED_KEY] ??=
  newShared(join(stateDir(process.env), PAUSE_FILE))) as Shared;

/** The engine and provider of one plugin registration. */
export class SpecCompact {
  readonly sessions: Map<string, SessionState>;
  private readonly inflight: Set<CallScope>;
  private readonly committed: Set<string>;
  private readonly shared: Shared;
  private delegate?: (params: CompactParams) => Promise<CompactResult>;

  constructor(
    readonly settings: Settings,
    private readonly log: PluginLogger,
    /** OpenClaw's `delegateCompactionToRuntime`, loaded lazily from `openclaw/plugin-sdk/core` unless given */
    delegate?: (params: CompactParams) => Promise<CompactResult>,
    /** injected in tests */
    private readonly fetchImpl?: typeof fetch,
    shared: Shared = PROCESS_SHARED,
  ) {
    this.delegate = delegate;
    this.shared = shared;
    ({ sessions: this.sessions, inflight: this.inflight, committed: this.committed } = shared);
  }

  /**
   * Record an accepted turn's advancement key; "duplicate" when OpenClaw retries one already seen.
   *
   * @example
   *   e.commit("k1"); e.commit("k1")  // "committed", then "duplicate"
   */
  commit(advancementKey: string): "committed" | "duplicate" {
    if (this.committed.has(advancementKey)) return "duplicate";
    this.committed.add(advancementKey);
    while (this.committed.size > 4096) this.committed.delete(this.committed.values().next().value as string);
    return "committed";
  }

  state(sessionId: string | undefined): SessionState {
    const key = sessionId || "";
    let s = this.sessions.get(key);
    if (!s) {
      s = freshState();
      const pause = this.shared.pauses.get(pauseKey(this.settings.serviceUrl, key)); // set by another process
      if (pause) Object.assign(s, { cooldownUntil: pause.until, timeoutsInARow: pause.timeoutsInARow,
                                    failuresInARow: pause.failuresInARow, last: { error: pause.error } });
      this.sessions.set(key, s);
      while (this.sessions.size > 256) this.sessions.delete(this.sessions.keys().next().value as string);
    }
    return s;
  }

  /**
   * Why the service is skipped for this call, or undefined.
   *
   * `force` does not lift a pause: OpenClaw forces its required pre-turn compactions too, and a
   * skipped service still leaves the compaction to OpenClaw's built-in summarizer.
   */
  blocked(s: SessionState, now = Date.now()): string | undefined {
    if (now < s.cooldownUntil) return `cooling down for ${Math.ceil((s.cooldownUntil - now) / 1000)} s after: ${s.last.error ?? "a failure"}`;
    if (s.ineffectiveInARow >= this.settings.maxIneffective) return `${s.ineffectiveInARow} compactions in a row freed nothing`;
    return undefined;
  }

  /** The compaction provider OpenClaw's summarization step calls. */
  provider(): CompactionProvider {
    return { id: ENGINE_ID, label: "SpecCompact service", summarize: (p) => this.summarize(p) };
  }

  /**
   * The engine call a summarization belongs to: its async scope, else the only call in progress.
   * With several in progress and no scope, none: the body then carries nothing session-specific.
   */
  currentCall(): CallScope | undefined {
    const call = scope.getStore();
    if (call) return call;
    return this.inflight.size === 1 ? this.inflight.values().next().value : undefined;
  }

  async summarize(params: SummarizeParams): Promise<string> {
    const call = this.currentCall();
    const s = this.state(call?.sessionId);
    const why = this.blocked(s);
    if (why) {
      s.last = { ...s.last, skipped: why };
      throw new Error(`speccompact: service skipped (${why}); OpenClaw's built-in summarizer runs instead`);
    }
    if (!params.previousSummary?.trim()) s.previousSummary = undefined; // a new session or a reset
    const previous = params.previousSummary?.trim() ? (s.previousSummary ?? params.previousSummary) : undefined;
    if (!call) this.log.info("speccompact: summarizing outside an engine call (OpenClaw's automatic compaction)");
    const body = requestBody(this.settings, params.messages, call, previous);
    let reply: Reply;
    try {
      reply = await postCompact(this.settings.serviceUrl, body, {
        apiKey: this.settings.apiKey, timeoutMs: this.settings.timeoutMs, signal: params.signal, fetchImpl: this.fetchImpl,
      });
    } catch (err) {
      if (params.signal?.aborted) throw err; // OpenClaw cancelled: it expects the rejection
      const failure = err instanceof Failure ? err : new Failure("http_error", String(err));
      this.fail(s, failure, call?.sessionId ?? "");
      throw new Error(`speccompact: ${failure.message}; OpenClaw's built-in summarizer runs instead`);
    }
    const summary = redact(reply.summary);
    const stats = (reply.result.stats ?? {}) as Record<string, unknown>;
    if (s.failuresInARow) this.shared.pauses.put(pauseKey(this.settings.serviceUrl, call?.sessionId ?? ""), undefined);
    s.previousSummary = summary;
    s.preparedTokens = 0; // the transcript restarts after this summary
    s.cooldownUntil = 0;
    s.timeoutsInARow = 0;
    s.failuresInARow = 0;
    const session = reply.result.session as { reused_messages?: unknown } | undefined;
    s.last = { method: reply.result.method, summaryTokens: reply.result.summary_tokens, acceptanceRate: stats.acceptance_rate,
               latencyMs: Math.round(reply.latencyMs), messages: (body.messages as unknown[]).length,
               incremental: "previous_summary" in body, focus: "focus" in body,
               reusedMessages: typeof session?.reused_messages === "number" ? session.reused_messages : 0 };
    this.log.info(`speccompact: summarized ${(body.messages as unknown[]).length} messages in ${Math.round(reply.latencyMs)} ms (method ${String(reply.result.method)})`);
    return redact(withReadNote(summary, reply.result)); // the agent learns which files it need not read again
  }

  private fail(s: SessionState, failure: Failure, sessionId: string): void {
    s.timeoutsInARow = failure.kind === "timeout" ? s.timeoutsInARow + 1 : 0;
    s.failuresInARow += 1;
    const wait = failure.cooldownS(s.timeoutsInARow);
    s.cooldownUntil = Date.now() + wait * 1000;
    s.previousSummary = undefined; // OpenClaw's summarizer writes this compaction: its summary comes back next time
    s.last = { error: failure.message, cooldownS: wait };
    this.shared.pauses.put(pauseKey(this.settings.serviceUrl, sessionId), {
      until: s.cooldownUntil, timeoutsInARow: s.timeoutsInARow, failuresInARow: s.failuresInARow, error: failure.message });
    this.log.warn(`speccompact: ${failure.message}; OpenClaw's built-in summarizer takes this compaction, the service is skipped for ${wait} s`);
  }

  /** The context engine OpenClaw selects with `plugins.slots.contextEngine: "speccompact"`. */
  engine(): ContextEngine {
    return {
      info: {
        id: ENGINE_ID, name: "SpecCompact", version: "0.1.0", ownsCompaction: false,
        // the engine stores no turns, so any fence is honoured and a commit is trivially atomic
        transcriptSemantics: { currentTurnFence: "before-current-turn-entry-v1", turnAdvancementIdempotency: "atomic-idempotent-v1" },
      },
      ingest: async () => ({ ingested: false }),
      afterTurn: async (params) => this.prepareAhead(params),
      commitTurn: async ({ advancementKey }) => ({ status: this.commit(advancementKey) }),
      assemble: async ({ messages }) => ({ messages, estimatedTokens: estimateTokens(messages) }),
      compact: (params) => this.compact(params),
    };
  }

  /**
   * Send the settled part of the transcript as a prepare when it is due (`ahead.ts`); returns at once.
   *
   * The request runs in the background; one at a time per session, so a
   * newer prepare never cancels one the service is still running.
   */
  prepareAhead(params: AfterTurnParams): void {
    const st = this.settings;
    const budget = params.tokenBudget ?? params.runtimeContext?.tokenBudget;
    const session = st.sendSession ? sessionField(params.sessionId) : undefined;
    if (!st.prepare || this.shared.prepareSupported === false || !session || !budget || !Array.isArray(params.messages)) return;
    const s = this.state(params.sessionId);
    if (s.preparing || this.blocked(s)) return;
    const prefix = settledPrefix(params.messages, st.keepRecentTokens);
    const rolling = { totalTokens: estimateTokens(params.messages), prefixTokens: estimateTokens(prefix),
                      preparedTokens: s.preparedTokens, budget, ratio: st.prepareRatio, step: st.prepareStep };
    if (!shouldPrepare(rolling)) return;
    const body = requestBody(st, prefix, { sessionId: params.sessionId, tokenBudget: budget, force: false }, s.previousSummary);
    if ((body.messages as unknown[]).length < 2) return;
    body.mode = "prepare";
    s.preparing = true;
    s.preparedTokens = rolling.prefixTokens;
    s.preparesSent += 1;
    this.log.info(`speccompact: preparing ${(body.messages as unknown[]).length} messages of session ${session} ahead of compaction`);
    void postPrepare(st.serviceUrl, body, { apiKey: st.apiKey, timeoutMs: Math.min(st.timeoutMs, 10_000), fetchImpl: this.fetchImpl })
      .then((answer) => {
        s.preparing = false;
        if (answer !== "failed") this.shared.prepareSupported = answer === "accepted";
      });
  }

  async compact(params: CompactParams): Promise<CompactResult> {
    const tokenBudget = params.tokenBudget ?? params.runtimeContext?.tokenBudget;
    const call: CallScope = { sessionId: params.sessionId, tokenBudget, customInstructions: params.customInstructions,
                              force: params.force === true };
    const s = this.state(params.sessionId);
    this.log.info(`speccompact: compacting session ${params.sessionId} (budget ${tokenBudget ?? "unknown"} tokens${call.force ? ", forced" : ""})`);
    let result: CompactResult;
    this.inflight.add(call);
    try {
      const delegate = this.delegate ?? (this.delegate = await loadDelegate());
      result = await scope.run(call, () => delegate(params));
    } catch (err) {
      if (params.abortSignal?.aborted) throw err; // cancellation belongs to OpenClaw
      this.log.error(`speccompact: compaction failed: ${String(err)}`);
      return { ok: false, compacted: false, reason: `speccompact: ${String(err)}` };
    } finally {
      this.inflight.delete(call);
    }
    const r = result.result;
    if (result.compacted && r && typeof r.tokensAfter === "number") {
      s.ineffectiveInARow = r.tokensAfter >= r.tokensBefore ? s.ineffectiveInARow + 1 : 0;
    }
    return result;
  }
}

async function loadDelegate(): Promise<(params: CompactParams) => Promise<CompactResult>> {
  const sdk = (await import("openclaw/plugin-sdk/core" as string)) as { delegateCompactionToRuntime: (p: CompactParams) => Promise<CompactResult> };
  return sdk.delegateCompactionToRuntime;
}
