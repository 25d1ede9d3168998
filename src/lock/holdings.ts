import { BUSY_ELSEWHERE_MS } from './distributed-lock.js';
import type { Hold } from './hold.js';

/** Past this many locks remembered busy elsewhere or recently released, the memory starts afresh. */
const MAX_REMEMBERED = 100_000;

/**
 * What one lock client knows of each lock, in one place: the hold one of its owners has, the locks its attempts are
 * taking, how many of its callers wait for each, and which were just found busy elsewhere. An attempt at a lock held,
 * taken or waited for here would only hear "busy", or overtake a waiter; one found busy elsewhere is not asked about
 * again for a moment unless its release is heard, so several processes on one hot key do not sweep it through the store.
 */
export class Holdings<H> {
  private readonly here = new Map<string, Hold<H> | 'taking'>();
  private readonly waiters = new Map<string, number>();
  private readonly busyElsewhere = new Map<string, number>();
  /** Releases heard, counted, and the count at each lock's last one: an answer older than a release is stale. */
  private releasesHeard = 0;
  private readonly lastRelease = new Map<string, number>();

  /** The hold of one of this client's owners, including one whose release is on its way to the store. */
  holdOf(key: string): Hold<H> | undefined {
    const entry = this.here.get(key);
    return entry === 'taking' ? undefined : entry;
  }

  /** Held, being taken or waited for here, or just found busy elsewhere: as far as this client knows, not free. */
  isFree(key: string): boolean {
    return !this.here.has(key) && !this.waiters.has(key) && !this.isBusyElsewhere(key);
  }

  isWaitedFor(key: string): boolean {
    return this.waiters.has(key);
  }

  /** Marks the lock as being taken by an attempt of this client; false if it is held, taken or waited for here. */
  startTaking(key: string): boolean {
    if (this.here.has(key) || this.waiters.has(key)) return false;
    this.here.set(key, 'taking');
    return true;
  }

  /** The attempt found the lock busy (`heardBefore`: `heard()` when it started) or failed. */
  notTaken(key: string, heardBefore?: number): void {
    if (this.here.get(key) === 'taking') this.here.delete(key);
    // A release heard since the attempt started makes its answer stale: trusting it would skip a free lock.
    if (heardBefore === undefined || (this.lastRelease.get(key) ?? -1) >= heardBefore) return;
    if (this.busyElsewhere.size > MAX_REMEMBERED) this.busyElsewhere.clear();
    this.busyElsewhere.set(key, Date.now() + BUSY_ELSEWHERE_MS);
  }

  held(hold: Hold<H>): void {
    this.here.set(hold.key, hold);
  }

  /** The hold is over here, released or lost, which counts as a release heard (another owner's later hold stays). */
  dropped(hold: Hold<H>): void {
    if (this.here.get(hold.key) === hold) this.here.delete(hold.key);
    this.released(hold.key);
  }

  /** A caller of this client starts (+1) or stops (−1) waiting for the lock. */
  waiting(key: string, change: 1 | -1): void {
    const count = (this.waiters.get(key) ?? 0) + change;
    if (count > 0) this.waiters.set(key, count);
    else this.waiters.delete(key);
  }

  /** The count of releases heard so far: taken before an attempt, so that a release during it is not missed. */
  heard(): number {
    return this.releasesHeard;
  }

  /** A release of the lock was heard: a notice from the store, or this client's own release. */
  released(key: string): void {
    this.busyElsewhere.delete(key);
    if (this.lastRelease.size > MAX_REMEMBERED) this.lastRelease.clear();
    this.lastRelease.set(key, this.releasesHeard++);
  }

  holds(): Hold<H>[] {
    return [...this.here.values()].filter((entry) => entry !== 'taking');
  }

  private isBusyElsewhere(key: string): boolean {
    const until = this.busyElsewhere.get(key);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.busyElsewhere.delete(key);
    return false;
  }
}
