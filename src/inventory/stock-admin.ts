import type { Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database, SkuRow } from '../db/schema.js';
import { AppError } from '../errors.js';
import type { LockLease } from '../lock/distributed-lock.js';
import {
  addToSegmentsFenced,
  deleteSegmentsFenced,
  findSkuForUpdate,
  insertSegments,
  insertSku,
  readSkuStock,
  recordAddition,
  updateSkuLayout,
} from './inventory.repository.js';
import { FencedOutError, lockBusy } from './refusals.js';
import type { SegmentLocks } from './segment-locks.js';
import { splitEvenly } from './segment-math.js';
import type { SkuDirectory, SkuEntry } from './sku-directory.js';

/** Σ stock ever added per SKU stays an exact double, with room for every sum the service computes. */
export const MAX_TOTAL_STOCK = 2 ** 52;

export interface SkuView {
  sku: string;
  segments: number;
  stock: number;
  available: number;
  sold: number;
  segmentStock: { segment: number; available: number }[];
}

/**
 * Configuration changes of a SKU: create, restock, re-segment. Restock and re-segment take every segment lock of the
 * current layout in ascending order (the same order as multi-segment orders, so no deadlock) and write fenced, so
 * they never interleave with an order's read-decide-write.
 */
export class StockAdmin {
  constructor(
    private readonly db: Db,
    private readonly locks: SegmentLocks,
    private readonly directory: SkuDirectory,
    /** How long a configuration change may wait for the segment locks. */
    private readonly lockWaitMs: number,
  ) {}

  async create(input: { sku: string; stock: number; segments: number }): Promise<SkuView> {
    try {
      await this.db.transaction().execute((trx) =>
        insertSku(trx, {
          sku: input.sku,
          segmentShares: splitEvenly(input.stock, input.segments),
          totalStock: input.stock,
        }),
      );
    } catch (error) {
      if ((error as { code?: string }).code === '23505') {
        throw new AppError('sku_exists', `SKU '${input.sku}' already exists`);
      }
      throw error;
    }
    await this.directory.announceChange(input.sku);
    return this.view(input.sku);
  }

  async view(sku: string): Promise<SkuView> {
    const stock = await readSkuStock(this.db, sku);
    if (!stock) throw new AppError('sku_not_found', `SKU '${sku}' does not exist`);
    return {
      sku: stock.sku.sku,
      segments: stock.sku.segment_count,
      stock: stock.sku.total_stock,
      available: stock.segments.reduce((total, s) => total + s.available, 0),
      sold: stock.sold,
      segmentStock: stock.segments,
    };
  }

  async restock(sku: string, quantity: number): Promise<SkuView> {
    await this.changeUnderAllLocks(sku, async (trx, row, leases) => {
      const totalStock = row.total_stock + quantity;
      if (totalStock > MAX_TOTAL_STOCK) {
        throw new AppError('stock_limit_exceeded', `total stock would exceed ${MAX_TOTAL_STOCK}`);
      }
      const shares = splitEvenly(quantity, row.segment_count);
      const writes = leases.map((lease, segment) => ({ segment, fence: lease.fence, add: shares[segment]! }));
      const written = await addToSegmentsFenced(trx, { skuId: row.id, layoutVersion: row.layout_version }, writes);
      if (written !== writes.length) return false;
      await updateSkuLayout(trx, row.id, { totalStock });
      await recordAddition(trx, row.id, quantity, 'restock');
      return true;
    });
    return this.view(sku);
  }

  async resegment(sku: string, segmentCount: number): Promise<SkuView> {
    await this.changeUnderAllLocks(sku, async (trx, row, leases) => {
      const writes = leases.map((lease, segment) => ({ segment, fence: lease.fence }));
      const removed = await deleteSegmentsFenced(trx, { skuId: row.id, layoutVersion: row.layout_version }, writes);
      if (removed.length !== writes.length) return false;
      const available = removed.reduce((total, s) => total + s.available, 0);
      // What the old segments sold moves to the SKU row, so the view's running total survives the new layout.
      const soldInEarlierLayouts = row.sold_in_earlier_layouts + removed.reduce((total, s) => total + s.sold, 0);
      const layoutVersion = row.layout_version + 1;
      await insertSegments(trx, row.id, layoutVersion, splitEvenly(available, segmentCount));
      await updateSkuLayout(trx, row.id, { segmentCount, layoutVersion, soldInEarlierLayouts });
      return true;
    });
    return this.view(sku);
  }

  /**
   * Runs `change` in a transaction while holding every segment lock of the SKU's current layout. `change` returns
   * false when a fenced write was refused (a lock was lost): everything is rolled back and tried again.
   */
  private async changeUnderAllLocks(
    sku: string,
    change: (trx: Transaction<Database>, row: SkuRow, leases: LockLease[]) => Promise<boolean>,
  ): Promise<void> {
    const deadline = Date.now() + this.lockWaitMs;
    for (;;) {
      const entry = await this.directory.get(sku);
      const leases = await this.acquireAll(entry, deadline);
      try {
        const applied = await this.db
          .transaction()
          .execute(async (trx) => {
            const row = await findSkuForUpdate(trx, entry.id);
            if (!row || row.layout_version !== entry.layoutVersion) return 'stale-layout' as const;
            if (!(await change(trx, row, leases))) throw new FencedOutError([]);
            return 'applied' as const;
          })
          .catch((error: unknown) => {
            if (error instanceof FencedOutError) return 'fenced-out' as const;
            throw error;
          });
        if (applied === 'applied') {
          await this.directory.announceChange(sku);
          return;
        }
        this.directory.invalidate(entry);
      } finally {
        await this.locks.releaseAll(leases);
      }
      if (Date.now() >= deadline) throw lockBusy(this.lockWaitMs);
    }
  }

  private async acquireAll(entry: SkuEntry, deadline: number): Promise<LockLease[]> {
    const refs = Array.from({ length: entry.segmentCount }, (_, segment) => ({
      sku: entry.sku,
      layoutVersion: entry.layoutVersion,
      segment,
    }));
    const leases = await this.locks.acquireInOrder(refs, deadline, this.locks.ticket());
    if (!leases) throw lockBusy(this.lockWaitMs);
    return leases;
  }
}
