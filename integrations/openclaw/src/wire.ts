/**
 * OpenClaw transcript messages -> the OpenAI chat messages `POST /v1/compact` accepts.
 *
 * OpenClaw picks which messages to summarize (its head and tail rules, with
 * tool calls kept beside their results); this only changes their shape:
 * `toolCall` blocks become `tool_calls`, `toolResult` messages become `tool`
 * messages, images and other non-text parts are named, thinking is dropped,
 * and secrets are redacted. A tool result whose call is not in the list is
 * dropped, because the service refuses it.
 */

import type { AgentMessage } from "./types.js";

export type WireToolCall = { id: string; type: "function"; function: { name: string; arguments: string } };
export type WireMessage = {
  role: "system" | "user" | "assistant" | "tool";
  content: string | null;
  tool_calls?: WireToolCall[];
  tool_call_id?: string;
  name?: string;
};

const SECRET = new RegExp(
  [
    "sk-[A-Za-z0-9_-]{16,}",
    "ghp_[A-Za-z0-9]{20,}",
    "AKIA[0-9A-Z]{16}",
    "xox[baprs]-[A-Za-z0-9-]{10,}",
    "-----BEGIN [A-Z ]*PRIVATE KEY-----[\\s\\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    "[Bb][Ee][Aa][Rr][Ee][Rr]\\s+[A-Za-z0-9._~+/-]{16,}=*",
  ].join("|"),
  "g",
);

/**
 * Replace API keys, tokens and private keys with `[REDACTED]`.
 *
 * @example
 *   redact("key sk-abcdefghijklmnopqrstu ok")  // "key [REDACTED] ok"
 */
export function redact(text: string): string {
  return text.replace(SECRET, "[REDACTED]");
}

/**
 * The text of a content field: strings kept, text parts joined, other parts named.
 *
 * @example
 *   contentText([{ type: "text", text: "hi" }, { type: "image" }])  // "hi\n[image]"
 */
export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return content == null ? "" : JSON.stringify(content);
  const parts: string[] = [];
  for (const part of content) {
    if (typeof part === "string") parts.push(part);
    else if (part && typeof part === "object") {
      const p = part as Record<string, unknown>;
      if (p.type === "text" && typeof p.text === "string") parts.push(p.text);
      else if (p.type === "thinking" || p.type === "redacted_thinking" || p.type === "toolCall") continue;
      else parts.push(`[${typeof p.type === "string" ? p.type : "attachment"}]`);
    }
  }
  return parts.join("\n");
}

function toolCalls(content: unknown): WireToolCall[] {
  if (!Array.isArray(content)) return [];
  return content
    .filter((p): p is Record<string, unknown> => !!p && typeof p === "object" && (p as { type?: unknown }).type === "toolCall")
    .map((p) => ({
      id: String(p.id ?? ""),
      type: "function" as const,
      function: {
        name: typeof p.name === "string" && p.name ? p.name : "?",
        arguments: redact(typeof p.arguments === "string" ? p.arguments : JSON.stringify(p.arguments ?? {})),
      },
    }));
}

/**
 * OpenClaw messages as the service's wire messages; the input is not modified.
 *
 * @example
 *   toWire([{ role: "assistant", content: [{ type: "toolCall", id: "c1", name: "read", arguments: { path: "a" } }] },
 *           { role: "toolResult", toolCallId: "c1", toolName: "read", content: [{ type: "text", text: "x" }] },
 *           { role: "toolResult", toolCallId: "gone", toolName: "read", content: [] }])
 *   // [{ role: "assistant", content: "", tool_calls: [{ id: "c1", ... }] }, { role: "tool", tool_call_id: "c1", content: "x" }]
 */
export function toWire(messages: readonly unknown[]): WireMessage[] {
  const out: WireMessage[] = [];
  const calls = new Set<string>();
  for (const raw of messages) {
    if (!raw || typeof raw !== "object") continue;
    const m = raw as AgentMessage;
    if (m.role === "assistant") {
      const tcs = toolCalls(m.content);
      tcs.forEach((tc) => calls.add(tc.id));
      out.push({ role: "assistant", content: redact(contentText(m.content)), ...(tcs.length ? { tool_calls: tcs } : {}) });
    } else if (m.role === "toolResult" || m.role === "tool") {
      const id = String(m.toolCallId ?? m.tool_call_id ?? "");
      if (!calls.has(id)) continue;
      out.push({ role: "tool", tool_call_id: id, content: redact(contentText(m.content)) });
    } else if (m.role === "user" || m.role === "system") {
      out.push({ role: m.role, content: redact(contentText(m.content)) });
    } else {
      // OpenClaw's own entries (bash executions, branch summaries, custom messages): kept as user text
      const text = contentText(m.content ?? m.summary ?? m.output ?? "");
      if (text.trim()) out.push({ role: "user", content: redact(`[${m.role}] ${text}`) });
    }
  }
  return out;
}
