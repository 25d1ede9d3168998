import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from '../../src/db/database.js';
import { AppError } from '../../src/errors.js';
import type { SegmentLocks } from '../../src/inventory/segment-locks.js';
import { readSegmentStock, writeDecidedSale } from './bench.repository.js';
import type { BenchSkus } from './bench-skus.js';
import { LocalMutex } from './local-mutex.js';

/** What guards the read-decide-write: nothing, a mutex inside this process, or the service's Redis segment lock. */
export const guardModes = ['none', 'local-mutex', 'redis-lock'] as const;
export type GuardMode = (typeof guardModes)[number];

export interface DemoSale {
  orderId: string;
  sku: string;
  quantity: number;
}

/**
 * The oversell demonstration: the order's critical section (read the stock, decide, write the computed value with
 * the order and its ledger row) run under each guard. Without a lock shared by every instance, two callers read the
 * same stock and both sell it; the ledger then holds more than the stock went down by.
 */
export class OversellDemo {
  private readonly mutex = new LocalMutex();

  constructor(
    private readonly db: Db,
    private readonly locks: SegmentLocks,
    private readonly skus: BenchSkus,
    private readonly options: { lockWaitMs: number; criticalSectionDelayMs: number },
  ) {}

  async sell(mode: GuardMode, skuName: string, quantity: number): Promise<DemoSale> {
    const sku = await this.skus.get(skuName);
    if (sku.segmentCount !== 1) {
      throw new AppError('bad_request', 'the oversell demonstration sells from single-segment SKUs only');
    }
    const segment = { skuId: sku.id, layoutVersion: sku.layoutVersion, segment: 0 };
    let fence: number | null = null;
    let release: () => Promise<unknown> = async () => {};
    if (mode === 'local-mutex') {
      const unlock = await this.mutex.acquire(sku.sku);
      release = async () => unlock();
    } else if (mode === 'redis-lock') {
      const lease = await this.locks.acquire({ sku: sku.sku, ...segment }, Date.now() + this.options.lockWaitMs);
      if (!lease) throw new AppError('lock_busy', `the segment stayed locked for ${this.options.lockWaitMs} ms`, {}, 1);
      fence = lease.fence;
      release = () => this.locks.releaseAll([lease]);
    }
    try {
      const available = await readSegmentStock(this.db, segment);
      if (available === undefined) throw new AppError('sku_not_found', `SKU '${sku.sku}' has no segment 0`);
      if (available < quantity) {
        throw new AppError('out_of_stock', `SKU '${sku.sku}' has ${available} unit(s) left, ${quantity} ordered`, {
          available,
        });
      }
      if (this.options.criticalSectionDelayMs > 0) await sleep(this.options.criticalSectionDelayMs);
      const orderId = randomUUID();
      const written = await writeDecidedSale(this.db, {
        orderId,
        ...segment,
        quantity,
        availableAfter: available - quantity,
        fence,
      });
      if (!written)
        throw new AppError('lock_busy', 'the segment lock was lost before the write; nothing was sold', {}, 1);
      return { orderId, sku: sku.sku, quantity };
    } finally {
      await release();
    }
  }
}
