/**
 * The slice of OpenClaw's plugin contract this plugin uses, copied from the
 * type declarations of openclaw 2026.9.6 (`src/context-engine/types.d.ts`,
 * `src/plugins/registry-contribution-types.d.ts`), so the package builds
 * without the 600 MB host package. At run time OpenClaw supplies the objects.
 */

/** A transcript message as OpenClaw stores it (pi-ai shapes; custom roles pass through). */
export type AgentMessage = { role: string; [key: string]: unknown };

export type ContextEngineRuntimeContext = Record<string, unknown> & { tokenBudget?: number };

export type CompactParams = {
  sessionId: string;
  sessionKey: string;
  agentId?: string;
  sessionTarget?: Record<string, unknown>;
  tokenBudget?: number;
  force?: boolean;
  currentTokenCount?: number;
  compactionTarget?: "budget" | "threshold";
  customInstructions?: string;
  runtimeSettings?: unknown;
  runtimeContext?: ContextEngineRuntimeContext;
  abortSignal?: AbortSignal;
};

export type CompactResult = {
  ok: boolean;
  compacted: boolean;
  reason?: string;
  result?: {
    summary?: string;
    firstKeptEntryId?: string;
    tokensBefore: number;
    tokensAfter?: number;
    details?: unknown;
    sessionId?: string;
    sessionTarget?: Record<string, unknown>;
  };
};

export type ContextEngineInfo = {
  id: string;
  name: string;
  version?: string;
  ownsCompaction?: boolean;
  transcriptSemantics?: {
    currentTurnFence?: "before-current-turn-entry-v1";
    turnAdvancementIdempotency?: "atomic-idempotent-v1";
  };
};

/** What OpenClaw passes to `afterTurn()` (before each model request of a tool loop, and after a run). */
export type AfterTurnParams = {
  sessionId: string;
  sessionKey?: string;
  /** the transcript since the latest compaction, the current turn included */
  messages: AgentMessage[];
  prePromptMessageCount?: number;
  tokenBudget?: number;
  runtimeContext?: ContextEngineRuntimeContext;
  isHeartbeat?: boolean;
};

export interface ContextEngine {
  readonly info: ContextEngineInfo;
  ingest(params: { sessionId: string; message: AgentMessage }): Promise<{ ingested: boolean }>;
  assemble(params: { sessionId: string; messages: AgentMessage[]; tokenBudget?: number }): Promise<{
    messages: AgentMessage[];
    estimatedTokens: number;
  }>;
  compact(params: CompactParams): Promise<CompactResult>;
  commitTurn?(params: { advancementKey: string; sessionId: string }): Promise<{ status: "committed" | "duplicate" }>;
  afterTurn?(params: AfterTurnParams): Promise<void>;
}

export type SummarizeParams = {
  messages: unknown[];
  signal?: AbortSignal;
  compressionRatio?: number;
  customInstructions?: string;
  summarizationInstructions?: { identifierPolicy?: string; identifierInstructions?: string };
  previousSummary?: string;
};

export interface CompactionProvider {
  id: string;
  label: string;
  summarize(params: SummarizeParams): Promise<string>;
}

export type PluginLogger = {
  info: (msg: string) => void;
  warn: (msg: string) => void;
  error: (msg: string) => void;
  debug?: (msg: string) => void;
};

/** The slice of `agents.defaults.compaction` the plugin reads. */
export type CompactionConfig = {
  provider?: string;
  keepRecentTokens?: number;
  midTurnPrecheck?: { enabled?: boolean };
};

export type PluginApi = {
  id: string;
  config?: { agents?: { defaults?: { compaction?: CompactionConfig } } } & Record<string, unknown>;
  pluginConfig?: Record<string, unknown>;
  logger: PluginLogger;
  registerContextEngine: (id: string, factory: (ctx: Record<string, unknown>) => ContextEngine) => void;
  registerCompactionProvider: (provider: CompactionProvider) => void;
};
