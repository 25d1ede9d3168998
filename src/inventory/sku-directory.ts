import { sql } from 'kysely';
import type { Db } from '../db/database.js';
import type { SkuRow } from '../db/schema.js';
import { AppError } from '../errors.js';
import { redisKeys } from '../lock/keys.js';
import type { RedisConnections } from '../redis/connections.js';
import type { SaleWindow } from './sale-window.js';
import { type SegmentRef, segmentKey } from './segment-locks.js';

/**
 * Bounds the memory whatever the size of the catalogue: past this many SKUs the cache starts over, as SegmentMemory
 * does, and a SKU no longer cached costs its next order one query (what a SKU costs an instance: docs/design.md,
 * "Known-empty segments and the sold-out fast path").
 */
const MAX_ENTRIES = 20_000;

/** What an instance remembers about a SKU between orders. */
export interface SkuEntry extends SaleWindow {
  readonly id: number;
  readonly sku: string;
  readonly segmentCount: number;
  readonly layoutVersion: number;
  /** The per-customer limit; null when there is none. A change announces itself like a layout change, as does a window's. */
  readonly maxPerCustomer: number | null;
  /** Sold through a waiting line (src/lines): its units go to the line's tickets only. Turning one on announces it. */
  readonly lined: boolean;
  /**
   * Segments read as 0 under their lock. Stock only grows through restock, re-segmentation and returned units
   * (cancelled or expired orders), which announce themselves and drop this entry, so an empty mark stays true until
   * then.
   */
  readonly emptySegments: Set<number>;
  /**
   * The segments' stock and fencing tokens as read with the entry, by segment: what a lock holder may use instead of
   * reading the row under its lock, if nobody held that lock since (SegmentMemory.recall). Spares the first order of
   * each segment a read. Two arrays of numbers rather than an object per segment: every cached SKU keeps them.
   */
  readonly loadedAvailable: readonly number[];
  readonly loadedFences: readonly number[];
  /** Set once a change notice or a failed read showed this layout is outdated. */
  stale: boolean;
}

/**
 * Per-instance cache of SKU layouts, limits and known-empty segments. Entries are dropped on a "SKU changed" notice from
 * any instance (published on the service's Redis by `announceChange`, a shard channel), and all of them when the
 * notice subscription comes back after a drop, a failover or a slot move (notices may have been missed meanwhile).
 */
export class SkuDirectory {
  private readonly entries = new Map<string, SkuEntry>();
  private readonly loading = new Map<string, Promise<SkuEntry>>();
  /** Bumped by every change notice, so a load that raced one is marked stale at once rather than cached. */
  private changeCount = 0;

  constructor(
    private readonly db: Db,
    /** The service's connections; the subscriber is shared with the lock's release notices. */
    private readonly redis: Pick<RedisConnections, 'commands' | 'subscriber' | 'onResubscribed'>,
    /** Most SKUs kept at once (a test lowers it). */
    private readonly maxEntries = MAX_ENTRIES,
  ) {}

  async start(): Promise<void> {
    this.redis.subscriber.on('smessage', (channel: string, sku: string) => {
      if (channel === redisKeys.skuChangedChannel) this.forget(sku);
    });
    this.redis.onResubscribed(() => {
      for (const sku of [...this.entries.keys()]) this.forget(sku);
    });
    await this.redis.subscriber.ssubscribe(redisKeys.skuChangedChannel);
  }

  /** The SKU's current layout; throws sku_not_found. */
  async get(sku: string): Promise<SkuEntry> {
    const cached = this.entries.get(sku);
    if (cached) return cached;
    let load = this.loading.get(sku);
    if (!load) {
      load = this.load(sku).finally(() => this.loading.delete(sku));
      this.loading.set(sku, load);
    }
    return load;
  }

  /** Drops `entry` after a read found its layout gone; a newer entry someone else already loaded stays. */
  invalidate(entry: SkuEntry): void {
    entry.stale = true;
    if (this.entries.get(entry.sku) === entry) this.entries.delete(entry.sku);
  }

  /** Remembers a segment read as 0 under its lock; false when it was known already. */
  markEmpty(entry: SkuEntry, segment: number): boolean {
    if (entry.emptySegments.has(segment)) return false;
    entry.emptySegments.add(segment);
    return true;
  }

  /** A change notice: whatever this instance knew about the SKU is outdated. */
  forget(sku: string): void {
    this.changeCount++;
    const entry = this.entries.get(sku);
    if (entry) this.invalidate(entry);
  }

  /**
   * Tells every instance (this one included) that the SKU's stock or layout changed. Called after the change
   * committed, so it must not fail the request: if Redis is unreachable, the other instances' notice connections
   * drop too, and they clear their caches when it comes back.
   */
  async announceChange(sku: string): Promise<void> {
    this.forget(sku);
    await this.redis.commands.spublish(redisKeys.skuChangedChannel, sku).catch(() => 0);
  }

  private async load(sku: string): Promise<SkuEntry> {
    const changeCountAtStart = this.changeCount;
    const row = await findSkuWithSegments(this.db, sku);
    if (!row) throw new AppError('sku_not_found', `SKU '${sku}' does not exist`);
    const entry: SkuEntry = {
      id: row.id,
      sku: row.sku,
      segmentCount: row.segment_count,
      layoutVersion: row.layout_version,
      maxPerCustomer: row.max_per_customer,
      lined: row.lined,
      saleStartsAt: row.sale_starts_at?.getTime() ?? null,
      saleEndsAt: row.sale_ends_at?.getTime() ?? null,
      emptySegments: new Set(),
      loadedAvailable: row.segments.map(([, available]) => available),
      loadedFences: row.segments.map(([, , fence]) => fence),
      stale: this.changeCount !== changeCountAtStart,
    };
    if (!entry.stale) {
      if (this.entries.size >= this.maxEntries && !this.entries.has(sku)) {
        // Entries dropped here no longer hear change notices: an order still holding one looks its SKU up again.
        for (const dropped of this.entries.values()) dropped.stale = true;
        this.entries.clear();
      }
      this.entries.set(sku, entry);
    }
    return entry;
  }
}

/** The SKU's row with the state of its current layout's segments, `[segment, available, fence]` by segment. */
function findSkuWithSegments(
  db: Db,
  sku: string,
): Promise<(SkuRow & { segments: [number, number, number][]; lined: boolean }) | undefined> {
  return db
    .selectFrom('skus as k')
    .selectAll('k')
    .select(
      sql<[number, number, number][]>`(select coalesce(json_agg(json_build_array(s.segment, s.available, s.fence_token)
              order by s.segment), '[]') from stock_segments s
        where s.sku_id = k.id and s.layout_version = k.layout_version)`.as('segments'),
    )
    .select(sql<boolean>`exists (select 1 from sku_lines l where l.sku_id = k.id)`.as('lined'))
    .where('k.sku', '=', sku)
    .executeTakeFirst();
}

const openCache = new WeakMap<SkuEntry, { empty: number; open: number[] }>();
const keysCache = new WeakMap<SkuEntry, string[]>();
/** 0 … n−1 by segment count n: what every SKU with no empty segment (most of them) shares. */
const everySegment: number[][] = [];

/** The SKU's segments not known to be empty (computed again only when a segment was marked empty since). */
export function openSegments(entry: SkuEntry): readonly number[] {
  const count = entry.segmentCount;
  if (entry.emptySegments.size === 0) return (everySegment[count] ??= Array.from({ length: count }, (_, s) => s));
  const cached = openCache.get(entry);
  if (cached && cached.empty === entry.emptySegments.size) return cached.open;
  const open: number[] = [];
  for (let segment = 0; segment < count; segment++) {
    if (!entry.emptySegments.has(segment)) open.push(segment);
  }
  openCache.set(entry, { empty: entry.emptySegments.size, open });
  return open;
}

/** The key of each segment of the entry's layout, by segment number: built once per entry. */
export function segmentKeysOf(entry: SkuEntry): readonly string[] {
  let keys = keysCache.get(entry);
  if (!keys) {
    keys = Array.from({ length: entry.segmentCount }, (_, segment) => segmentKey(refOf(entry, segment)));
    keysCache.set(entry, keys);
  }
  return keys;
}

export function refOf(entry: SkuEntry, segment: number): SegmentRef {
  return { sku: entry.sku, layoutVersion: entry.layoutVersion, segment };
}
