/** The plugin's settings, read from `plugins.entries.speccompact.config` in openclaw.json. */

export type Settings = {
  /** base URL of the sgl_speccompact service */
  serviceUrl: string;
  /** bearer token, when the service runs with --api-key */
  apiKey?: string;
  /** compaction method the service runs */
  method: string;
  /** run the Source-Judged post-filter (SJC) */
  sourceJudge: boolean;
  /** give up on one service request after this long (ms) */
  timeoutMs: number;
  /** upper bound on the summary, at most the service's own max_summary_tokens (tokens) */
  maxSummaryTokens: number;
  /** send OpenClaw's session id as `session` */
  sendSession: boolean;
  /** compactions in a row that freed nothing before the service is skipped */
  maxIneffective: number;
  /** send ahead-of-time compactions (prepares) from tool loops */
  prepare: boolean;
  /** first prepare once the transcript reaches this share of the token budget (ratio) */
  prepareRatio: number;
  /** again once the settled prefix grew by this share of the token budget (ratio) */
  prepareStep: number;
  /** the recent tail OpenClaw keeps verbatim: never prepared (tokens; OpenClaw's keepRecentTokens) */
  keepRecentTokens: number;
};

export const DEFAULTS: Settings = {
  serviceUrl: "http://127.0.0.1:8000",
  method: "speccompact",
  sourceJudge: false,
  timeoutMs: 120_000,
  maxSummaryTokens: 2048,
  sendSession: true,
  maxIneffective: 2,
  prepare: true,
  prepareRatio: 0.5,
  prepareStep: 0.1,
  keepRecentTokens: 20_000, // OpenClaw's default
};

function pick<T>(value: unknown, ok: (v: unknown) => boolean, fallback: T): T {
  return ok(value) ? (value as T) : fallback;
}

const isText = (v: unknown) => typeof v === "string" && v.trim() !== "";
const isPositiveInt = (v: unknown) => Number.isInteger(v) && (v as number) > 0;
const isRatio = (v: unknown) => typeof v === "number" && v > 0 && v <= 1;

/**
 * Settings from the plugin config; a missing or ill-typed field takes its default.
 *
 * `SGL_SPECCOMPACT_API_KEY` in the environment stands in for `apiKey`;
 * `keepRecentTokens` comes from OpenClaw's own `agents.defaults.compaction`.
 *
 * @example
 *   readSettings({ serviceUrl: "http://gpu:8000/", sourceJudge: true }).serviceUrl  // "http://gpu:8000"
 */
export function readSettings(raw: Record<string, unknown> | undefined, env: Record<string, string | undefined> = {},
                             compaction: { keepRecentTokens?: unknown } = {}): Settings {
  const c = raw ?? {};
  const apiKey = pick<string | undefined>(c.apiKey, isText, undefined) ?? (isText(env.SGL_SPECCOMPACT_API_KEY) ? env.SGL_SPECCOMPACT_API_KEY : undefined);
  return {
    serviceUrl: pick(c.serviceUrl, isText, DEFAULTS.serviceUrl).trim().replace(/\/+$/, ""),
    apiKey,
    method: pick(c.method, isText, DEFAULTS.method),
    sourceJudge: pick(c.sourceJudge, (v) => typeof v === "boolean", DEFAULTS.sourceJudge),
    timeoutMs: pick(c.timeoutMs, isPositiveInt, DEFAULTS.timeoutMs),
    maxSummaryTokens: pick(c.maxSummaryTokens, isPositiveInt, DEFAULTS.maxSummaryTokens),
    sendSession: pick(c.sendSession, (v) => typeof v === "boolean", DEFAULTS.sendSession),
    maxIneffective: DEFAULTS.maxIneffective,
    prepare: pick(c.prepare, (v) => typeof v === "boolean", DEFAULTS.prepare),
    prepareRatio: pick(c.prepareRatio, isRatio, DEFAULTS.prepareRatio),
    prepareStep: pick(c.prepareStep, isRatio, DEFAULTS.prepareStep),
    keepRecentTokens: pick(compaction.keepRecentTokens, isPositiveInt, DEFAULTS.keepRecentTokens),
  };
}
