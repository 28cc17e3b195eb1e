/**
 * The read set, told to the agent after a compaction: which files it need not read again.
 *
 * The service's result carries `ledger.read_set`: every file the compacted
 * messages read or changed, with the message of its last read and whether it
 * changed after (an edit, a write, a command that writes it). The provider
 * appends two lines to the summary it returns, after the service's exact
 * ledger (the summary's last section), so they reach the agent with the
 * summary. The service drops any line of that section outside its grammar when
 * it reads the summary back, so no model carries them to a later compaction.
 */

export const UNCHANGED = "Already read, unchanged since: "; // files the agent need not read again
export const CHANGED = "Read, then changed (read again before relying on it): "; // changed after the last read
export const MAX_READ = 12; // files named per line (the newest)

/** One file of the service's `ledger.read_set`. */
export type ReadFile = {
  /** the file as the history wrote it */
  path: string;
  /** the message of its last read (null: changed, never read) */
  last_read: number | null;
  /** changed after that read */
  changed_after: boolean;
  /** the message of that change (null: unchanged since) */
  changed_at: number | null;
};

function isReadFile(f: unknown): f is ReadFile {
  const r = f as ReadFile;
  return typeof r === "object" && r !== null && typeof r.path === "string" && typeof r.last_read === "number";
}

/**
 * The lines for the agent from a service result's `ledger.read_set` (none when it has no ledger).
 *
 * @example
 *   readNote({ ledger: { read_set: [{ path: "a.py", last_read: 3, changed_after: false, changed_at: null }] } })
 *   // ["Already read, unchanged since: `a.py` (m3)"]
 */
export function readNote(result: Record<string, unknown>): string[] {
  const ledger = result.ledger as { read_set?: unknown } | null | undefined;
  const files = Array.isArray(ledger?.read_set) ? ledger.read_set.filter(isReadFile) : [];
  const quote = (p: string) => "`" + p.replaceAll("`", "'") + "`";
  const unchanged = files.filter((f) => !f.changed_after).map((f) => `${quote(f.path)} (m${f.last_read})`);
  const changed = files.filter((f) => f.changed_after)
    .map((f) => `${quote(f.path)} (read m${f.last_read}, changed m${f.changed_at ?? "?"})`);
  return [
    ...(unchanged.length ? [UNCHANGED + unchanged.slice(-MAX_READ).join(", ")] : []),
    ...(changed.length ? [CHANGED + changed.slice(-MAX_READ).join(", ")] : []),
  ];
}

/** The summary the agent gets: the service's, then the read-set lines. */
export function withReadNote(summary: string, result: Record<string, unknown>): string {
  const note = readNote(result);
  return note.length ? `${summary.replace(/\s+$/, "")}\n${note.join("\n")}\n` : summary;
}
