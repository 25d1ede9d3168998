import type { LockLease } from '../lock/distributed-lock.js';
import type { SegmentState } from './batch-statements.js';
import type { SkuEntry } from '../inventory/sku-directory.js';

/** Bounds the memory: one entry per segment lock this process took, dropped wholesale past this many. */
const MAX_ENTRIES = 100_000;

/** What a lock holder needs of a segment's row: its stock and its fencing token (its last writer's). */
export type RowState = Pick<SegmentState, 'available' | 'fence'>;

/** A segment's row as last seen, the token of the hold that saw it, and the SKU's entry then. */
interface Seen extends RowState {
  heldWith: number;
  entry: SkuEntry;
}

/**
 * What this process last saw of each segment, and under which fencing token. The lock tells each acquisition which
 * token was issued just before its own; when that is the token this process last used, nobody else held the lock in
 * between and the remembered state is still the row's state: the holder can skip reading it back from Postgres.
 * (Backends that cannot tell never get this shortcut.)
 *
 * Never a matter of safety: the commit insists on the row still carrying the token it was read with, so a stale
 * memory costs one refused write and a fresh read, never a wrong one.
 */
export class SegmentMemory {
  /**
   * By `segmentKey`, under the string `segmentKeysOf` keeps with the SKU's entry rather than each lease's copy of it:
   * one string per segment this instance has served, not two.
   */
  private readonly known = new Map<string, Seen>();

  /**
   * The segment's state if nobody else held its lock since this process last saw it: under its own last hold, or
   * when the SKU's `entry` was loaded (`loadedFences`; a row's token is its last writer's, so a lock whose previous
   * token is the row's has not been held since that write).
   */
  recall(key: string, lease: LockLease, entry: SkuEntry, segment: number): RowState | undefined {
    const previous = lease.previousFence;
    if (previous === undefined) return undefined;
    const known = this.known.get(key);
    if (known?.heldWith === previous) return known;
    if (entry.loadedFences[segment] !== previous) return undefined;
    return { available: entry.loadedAvailable[segment]!, fence: previous };
  }

  /**
   * A guess for planning, never for writing: what this process last saw the segment hold under the SKU's current
   * `entry`, whoever held it since; else what the segment held when the entry was loaded. Without the second, the first
   * order of a SKU whose segments hold less than it asks for would try one unknown segment per round trip, and on a
   * SKU of a thousand one-unit segments run out of time before it tried them all.
   */
  peek(key: string, entry: SkuEntry, segment: number): number | undefined {
    const known = this.known.get(key);
    if (known?.entry === entry) return known.available;
    return entry.loadedAvailable[segment] ?? known?.available;
  }

  /**
   * At most what the segment holds now, as far as this process can prove: what it last saw under the lock, if it saw
   * it under the SKU's current entry. Stock only shrinks until a restock, re-segmentation or returned units, and each
   * of those replaces the entry (a change notice), so the value then stops counting.
   */
  upperBound(key: string, entry: SkuEntry): number | undefined {
    const known = this.known.get(key);
    return known && known.entry === entry && !entry.stale ? known.available : undefined;
  }

  /** The state as the holder of `lease`, on the SKU's `entry`, last saw or wrote it. */
  remember(key: string, lease: LockLease, { available, fence }: RowState, entry: SkuEntry): void {
    if (this.known.size >= MAX_ENTRIES && !this.known.has(key)) this.known.clear();
    this.known.set(key, { available, fence, heldWith: lease.fence, entry });
  }

  /** After a failed or uncertain write: the row may or may not hold what we meant to write. */
  forget(key: string): void {
    this.known.delete(key);
  }
}
