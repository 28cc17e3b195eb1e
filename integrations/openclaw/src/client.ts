/**
 * One `POST /v1/compact` to the sgl_speccompact service, with the platform `fetch`.
 *
 * Anything but a complete summary becomes a {@link Failure} carrying the
 * cooldown Hermes's compressor (and the Hermes plugin) applies to the same
 * kind of failure: 60, 300, then 900 s for timeouts (408/429/502/504 count
 * as timeouts), 30 s for an answer that is not a summary, 600 s for a refused
 * credential, 60 s for anything else. Cancellation by the caller is not a
 * failure: the caller's abort reason is thrown unchanged.
 */

export const TIMEOUT_LADDER_S = [60, 300, 900] as const; // cooldown after the 1st, 2nd, 3rd+ timeout in a row
export const BAD_RESPONSE_COOLDOWN_S = 30;
export const AUTH_COOLDOWN_S = 600;
export const OTHER_COOLDOWN_S = 60;

export type FailureKind = "timeout" | "unreachable" | "http_error" | "auth" | "bad_response" | "truncated";

/** A request that produced no usable summary. */
export class Failure extends Error {
  constructor(
    /** what went wrong, for the cooldown */
    readonly kind: FailureKind,
    /** one line for the log */
    readonly detail: string,
    /** the HTTP status, when there was one */
    readonly status?: number,
  ) {
    super(`${kind}: ${detail}`);
    this.name = "SpecCompactFailure";
  }

  /**
   * Seconds before the next automatic compaction may call the service.
   *
   * @example
   *   new Failure("timeout", "x").cooldownS(2)  // 300
   */
  cooldownS(timeoutsInARow: number): number {
    if (this.kind === "timeout") return TIMEOUT_LADDER_S[Math.min(Math.max(timeoutsInARow, 1), TIMEOUT_LADDER_S.length) - 1];
    if (this.kind === "auth") return AUTH_COOLDOWN_S;
    if (this.kind === "bad_response") return BAD_RESPONSE_COOLDOWN_S;
    return OTHER_COOLDOWN_S;
  }
}

/** What the service answered for one compaction. */
export type Reply = {
  /** the summary body */
  summary: string;
  /** the whole CompactionResult JSON */
  result: Record<string, unknown>;
  /** round trip measured here (ms) */
  latencyMs: number;
};

export type CompactOptions = {
  /** bearer token */
  apiKey?: string;
  /** give up after this long (ms) */
  timeoutMs: number;
  /** the caller's cancellation (OpenClaw's compaction abort signal) */
  signal?: AbortSignal;
  /** injected in tests; the platform fetch otherwise */
  fetchImpl?: typeof fetch;
};

/**
 * The Failure an HTTP error status stands for.
 *
 * @example
 *   httpFailure(504, { error: { type: "compaction_timeout", message: "slow" } }).kind  // "timeout"
 */
export function httpFailure(status: number, body: unknown): Failure {
  const err = (body && typeof body === "object" ? (body as { error?: { type?: string; message?: string } }).error : undefined) ?? {};
  const detail = `HTTP ${status} ${err.type ?? ""}: ${err.message ?? ""}`.replace(/\s+/g, " ").trim();
  if ([408, 429, 502, 504].includes(status)) return new Failure("timeout", detail, status);
  if (status === 401 || status === 403) return new Failure("auth", detail, status);
  return new Failure("http_error", detail, status);
}

/** POST `body` to `<url>/v1/compact`; a {@link Reply}, or a thrown {@link Failure} (or the caller's abort). */
export async function compact(url: string, body: Record<string, unknown>, opts: CompactOptions): Promise<Reply> {
  const doFetch = opts.fetchImpl ?? fetch;
  const timeout = AbortSignal.timeout(opts.timeoutMs);
  const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
  const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
  if (opts.apiKey) headers.authorization = `Bearer ${opts.apiKey}`;
  const t0 = performance.now();
  let status: number;
  let text: string;
  try {
    const res = await doFetch(`${url}/v1/compact`, { method: "POST", headers, body: JSON.stringify(body), signal });
    status = res.status;
    text = await res.text();
  } catch (err) {
    if (opts.signal?.aborted) throw opts.signal.reason ?? err; // cancelled by OpenClaw: not a service failure
    if (timeout.aborted) throw new Failure("timeout", `no answer within ${opts.timeoutMs / 1000} s`);
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new Failure("unreachable", `${url}: ${cause?.code ?? cause?.message ?? String(err)}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    if (status >= 400) throw httpFailure(status, undefined);
    throw new Failure("bad_response", "the answer is not JSON", status);
  }
  if (status >= 400) throw httpFailure(status, parsed);
  const result = (parsed && typeof parsed === "object" ? parsed : {}) as Record<string, unknown>;
  const summary = typeof result.summary === "string" ? result.summary.trim() : "";
  if (!summary) throw new Failure("bad_response", "no summary in the answer", status);
  if (result.truncated) throw new Failure("truncated", "the summary is incomplete (cut off, or a section missing)", status);
  return { summary, result, latencyMs: performance.now() - t0 };
}

/** How the service took an ahead-of-time compaction. */
export type PrepareAnswer = "accepted" | "unsupported" | "failed";

const PREPARE_UNSUPPORTED = [400, 404, 405, 422]; // a service without ahead-of-time compaction refuses the fields

/**
 * POST an ahead-of-time compaction (`"mode": "prepare"`); never throws.
 *
 * "accepted": 2xx, the service compacts in the background; "unsupported": a
 * service that does not know `session`/`mode` (400/404/405/422); "failed":
 * anything else, tried again later.
 */
export async function prepare(url: string, body: Record<string, unknown>, opts: CompactOptions): Promise<PrepareAnswer> {
  const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
  if (opts.apiKey) headers.authorization = `Bearer ${opts.apiKey}`;
  try {
    const res = await (opts.fetchImpl ?? fetch)(`${url}/v1/compact`, {
      method: "POST", headers, body: JSON.stringify(body), signal: AbortSignal.timeout(opts.timeoutMs),
    });
    await res.text();
    if (res.status >= 200 && res.status < 300) return "accepted";
    return PREPARE_UNSUPPORTED.includes(res.status) ? "unsupported" : "failed";
  } catch {
    return "failed";
  }
}
