/**
 * The service's pause after a failure, kept in a small file under OpenClaw's state folder.
 *
 * `openclaw agent --local` starts a new process for every turn, so a pause
 * held in memory is forgotten at once and every turn would wait on a
 * service that is down. The file holds, per service URL and session, when
 * the pause ends and the failure streak; entries past their end are
 * dropped. Every read or write failure is ignored: the pause is an
 * optimisation, and without the file the plugin behaves as before.
 */

import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

export const PAUSE_FILE = join("speccompact", "pause.json"); // relative to the state folder
const MAX_ENTRIES = 256; // sessions remembered in the file

/** One session's pause, as stored. */
export type Pause = {
  /** Date.now() before which automatic compaction skips the service (ms) */
  until: number;
  /** consecutive timeouts (cooldown ladder step) */
  timeoutsInARow: number;
  /** consecutive failures of any kind */
  failuresInARow: number;
  /** the failure that started it */
  error?: string;
};

/**
 * OpenClaw's state folder: `$OPENCLAW_STATE_DIR`, else `.openclaw` under `$OPENCLAW_HOME` or the home folder.
 *
 * @example
 *   stateDir({ OPENCLAW_STATE_DIR: "/srv/oc" })  // "/srv/oc"
 *   stateDir({ OPENCLAW_HOME: "/h" })            // "/h/.openclaw"
 */
export function stateDir(env: Record<string, string | undefined>): string {
  if (env.OPENCLAW_STATE_DIR?.trim()) return env.OPENCLAW_STATE_DIR.trim();
  return join(env.OPENCLAW_HOME?.trim() || homedir(), ".openclaw");
}

/** The key of one session's pause: the service it is about, then the session. */
export function pauseKey(serviceUrl: string, sessionId: string): string {
  return `${serviceUrl} ${sessionId}`;
}

/** The pauses in one file (a path, or undefined to keep them in memory only). */
export class PauseFile {
  constructor(readonly path: string | undefined) {}

  /** Every pause still running, by key. */
  read(now = Date.now()): Record<string, Pause> {
    if (!this.path) return {};
    try {
      const raw = JSON.parse(readFileSync(this.path, "utf8")) as Record<string, Pause>;
      return Object.fromEntries(Object.entries(raw).filter(([, p]) => p && typeof p.until === "number" && p.until > now));
    } catch {
      return {};
    }
  }

  get(key: string, now = Date.now()): Pause | undefined {
    return this.read(now)[key];
  }

  /** Store (or, with undefined, clear) one pause; the write replaces the file whole. */
  put(key: string, pause: Pause | undefined, now = Date.now()): void {
    if (!this.path) return;
    const all = this.read(now);
    if (pause) all[key] = pause;
    else if (key in all) delete all[key];
    else return;
    const kept = Object.entries(all).sort(([, a], [, b]) => b.until - a.until).slice(0, MAX_ENTRIES);
    try {
      mkdirSync(dirname(this.path), { recursive: true });
      const tmp = `${this.path}.${process.pid}.tmp`;
      writeFileSync(tmp, JSON.stringify(Object.fromEntries(kept)));
      renameSync(tmp, this.path);
    } catch {
      // a read-only state folder: the pause lives in memory only
    }
  }
}
