/**
 * Ahead-of-time compactions ("prepares"): which messages, and when.
 *
 * OpenClaw calls the engine's `afterTurn()` with the whole transcript since
 * the latest compaction (before every model request of a tool loop for
 * engines that own compaction, after a completed turn otherwise). The
 * engine sends the part OpenClaw's next compaction will surely summarize --
 * everything before the recent tail OpenClaw keeps (`keepRecentTokens`),
 * never ending inside a tool call's results -- as `"mode": "prepare"` with
 * the session id. The compaction that follows sends the same messages
 * first, so the service finds that prefix already summarized. Prepares
 * start at `prepareRatio` of the token budget and roll forward each time
 * the prefix grew by `prepareStep` of it, so the compaction finds a prefix
 * at most a few tool calls old. Pure functions.
 */

import type { AgentMessage } from "./types.js";

export const SUMMARY_ROLES = new Set(["compactionSummary", "branchSummary"]); // OpenClaw's summary entries

/**
 * A rough token count (4 characters a token) for OpenClaw's threshold checks.
 *
 * @example
 *   estimateTokens([{ role: "user", content: "abcdefgh" }])  // 9
 */
export function estimateTokens(messages: readonly AgentMessage[]): number {
  let chars = 0;
  for (const m of messages) chars += JSON.stringify(m.content ?? "").length;
  return Math.ceil(chars / 4) + messages.length * 4;
}

const isResult = (m: AgentMessage | undefined) => m?.role === "toolResult" || m?.role === "tool";
const callsTools = (m: AgentMessage | undefined) =>
  m?.role === "assistant" && Array.isArray(m.content) && m.content.some((p) => (p as { type?: unknown })?.type === "toolCall");

/**
 * The messages OpenClaw's next compaction will summarize for sure: after the latest summary entry,
 * before the last `keepRecentTokens`, whole tool groups only.
 *
 * @example
 *   const call = { role: "assistant", content: [{ type: "toolCall", id: "c" }] };
 *   settledPrefix([{ role: "user", content: "go" }, call, { role: "toolResult", content: "x".repeat(400) }], 50)
 *   // [{ role: "user", content: "go" }]: the call stays with its result, inside the kept tail
 */
export function settledPrefix(messages: readonly AgentMessage[], keepRecentTokens: number): AgentMessage[] {
  let start = 0;
  for (let i = messages.length - 1; i >= 0; i--) {
    if (SUMMARY_ROLES.has(messages[i].role)) {
      start = i + 1;
      break;
    }
  }
  const rest = messages.slice(start);
  let end = rest.length;
  for (let tail = 0; end > 0 && tail < keepRecentTokens; end--) tail += estimateTokens([rest[end - 1]]);
  while (end > 0 && (isResult(rest[end]) || callsTools(rest[end - 1]))) end--;
  return rest.slice(0, end);
}

/** When a prepare goes out (all in tokens, ratios of the budget). */
export type Rolling = {
  /** the transcript's size now */
  totalTokens: number;
  /** the settled prefix's size now */
  prefixTokens: number;
  /** the settled prefix's size at the last prepare (0: none yet) */
  preparedTokens: number;
  /** the model's context budget */
  budget: number;
  /** first prepare once the transcript reaches this share of the budget */
  ratio: number;
  /** again once the prefix grew by this share of the budget */
  step: number;
};

/**
 * Whether to send a prepare now.
 *
 * @example
 *   shouldPrepare({ totalTokens: 40_000, prefixTokens: 20_000, preparedTokens: 0, budget: 64_000, ratio: 0.5, step: 0.1 })  // true
 *   shouldPrepare({ totalTokens: 44_000, prefixTokens: 24_000, preparedTokens: 20_000, budget: 64_000, ratio: 0.5, step: 0.1 })  // false
 */
export function shouldPrepare(r: Rolling): boolean {
  return r.budget > 0 && r.prefixTokens > 0 && r.totalTokens >= r.ratio * r.budget
    && r.prefixTokens >= r.preparedTokens + r.step * r.budget;
}
