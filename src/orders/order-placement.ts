import { createHash } from 'node:crypto';
import type { Db } from '../db/database.js';
import { timeOrderedUuid } from '../db/time-ordered-uuid.js';
import { AppError } from '../errors.js';
import { findOrder } from './order.repository.js';
import type { BatchHooks, OrderTrace, WhileHeld } from './batch-steps.js';
import { OrderBatcher } from './order-batcher.js';
import { type Ending, lineRequired, type PlacedOrder, refusalBeforeLocks } from './outcome.js';
import type { SegmentLocks } from '../inventory/segment-locks.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import { hasEnded } from '../inventory/sale-window.js';
import type { SkuDirectory, SkuEntry } from '../inventory/sku-directory.js';
import type { Outbox } from '../events/outbox.js';

/** Units of one SKU. */
export interface OrderLine {
  sku: string;
  quantity: number;
}

export interface OrderRequest {
  /** One line, or a cart of several with distinct SKUs: placed all or nothing. */
  lines: OrderLine[];
  customerId?: string;
  /** Reserve the units for this long instead of confirming the order at once. */
  holdSeconds?: number;
  idempotencyKey?: string;
  /** An admission from the SKU's waiting line (src/lines): the only orders a SKU with a line takes. */
  fromLine?: boolean;
}

export interface OrderPlacementOptions {
  /** How long an order may wait in line for its segments before it is refused as lock_busy (LOCK_WAIT_MS). */
  lockWaitMs: number;
  /** Most orders in one batch (COMBINE_MAX_BATCH). */
  combineMaxBatch: number;
  /** Batches running at once (BATCHES_IN_FLIGHT): each holds its own segments. */
  batchesInFlight: number;
  /** A step each batch that takes stock runs inside its segments' hold (the load test's business step); none in the product. */
  whileHeld?: WhileHeld;
  /** Where placed orders' events go (the outbox knows whether events are written at all). */
  outbox: Outbox;
}

/** Observers of the flow (metrics); every hook is optional and must not throw. */
export interface OrderFlowHooks extends BatchHooks {
  /**
   * Wraps each placement, to time it and record its outcome; `trace` is complete once `place` has settled. `skus`:
   * the SKUs the order names.
   */
  observeOrder?(place: () => Promise<PlacedOrder>, trace: OrderTrace, skus: readonly string[]): Promise<PlacedOrder>;
}

/**
 * Placing an order, from the validated request to its answer:
 *
 * 1. an Idempotency-Key already used answers with its order (`replay`);
 * 2. the SKUs are looked up in the instance's directory (cached layouts, limits, sale windows, segments known empty);
 * 3. a SKU outside its sale window (by the shared clock), or known to be sold out, is refused at once, with no lock
 *    and no query;
 * 4. the order joins the instance's next batch (`OrderBatcher`), which locks, decides, writes and answers it.
 */
export class OrderPlacement {
  private readonly batcher: OrderBatcher;

  constructor(
    private readonly db: Db,
    private readonly locks: SegmentLocks,
    private readonly directory: SkuDirectory,
    private readonly clock: SharedClock,
    private readonly options: OrderPlacementOptions,
    private readonly hooks: OrderFlowHooks = {},
  ) {
    this.batcher = new OrderBatcher(db, locks, directory, clock, options, hooks);
  }

  place(request: OrderRequest): Promise<PlacedOrder> {
    const trace: OrderTrace = { segmentVisits: 0, waitedMs: 0 };
    const place = () => this.placeOnce(request, trace);
    return this.hooks.observeOrder
      ? this.hooks.observeOrder(
          place,
          trace,
          request.lines.map((line) => line.sku),
        )
      : place();
  }

  private async placeOnce(request: OrderRequest, trace: OrderTrace): Promise<PlacedOrder> {
    const fingerprint = request.idempotencyKey ? fingerprintOf(request) : null;
    const replayed = request.idempotencyKey ? await this.replay(request.idempotencyKey, fingerprint) : undefined;
    if (replayed) return replayed;
    const deadline = Date.now() + this.options.lockWaitMs;
    for (;;) {
      const entries = await Promise.all(request.lines.map((line) => this.directory.get(line.sku)));
      const lines = request.lines.map((line, i) => ({ entry: entries[i]!, quantity: line.quantity }));
      const now = this.clock.now();
      // A line whose sale window ended takes no joins: the SKU is then refused for its window, not sent to its line.
      const lined = request.fromLine ? undefined : entries.find((entry) => entry.lined && !hasEnded(entry, now));
      if (lined) throw lineRequired(lined.sku);
      const refusal = refusalBeforeLocks(lines, request.customerId ?? null, now);
      if (refusal) throw refusal;

      const ending = await this.inNextBatch(request, entries, fingerprint, deadline, trace);
      if (ending.outcome === 'placed') return { order: ending.order, replayed: false };
      if (ending.outcome !== 'key_taken') throw ending.problem;
      // Another request placed an order under this key while ours was in flight: answer with it.
      const winner = await this.replay(request.idempotencyKey!, fingerprint);
      if (winner) return winner;
    }
  }

  private inNextBatch(
    request: OrderRequest,
    entries: SkuEntry[],
    fingerprint: string | null,
    deadline: number,
    trace: OrderTrace,
  ): Promise<Ending> {
    return new Promise((end, fail) => {
      this.batcher.enqueue({
        fields: {
          orderId: timeOrderedUuid(),
          idempotencyKey: request.idempotencyKey ?? null,
          requestFingerprint: fingerprint,
          customerId: request.customerId ?? null,
          holdSeconds: request.holdSeconds ?? null,
        },
        lines: request.lines.map((line, i) => ({ entry: entries[i]!, quantity: line.quantity, wantsEvery: false })),
        exclusiveBy: exclusiveBy(request, entries),
        ticket: this.locks.ticket(),
        deadline,
        trace,
        queuedAt: Date.now(),
        end,
        fail,
      });
    });
  }

  private async replay(idempotencyKey: string, fingerprint: string | null): Promise<PlacedOrder | undefined> {
    const prior = await findOrder(this.db, { idempotencyKey });
    if (!prior) return undefined;
    if (prior.requestFingerprint !== fingerprint) {
      throw new AppError('idempotency_key_reused', 'this Idempotency-Key was used for a different order request');
    }
    return { order: prior, replayed: true };
  }
}

/**
 * What the order asks, hashed. A single line with neither customer nor hold hashes as the plain single-SKU request,
 * whose form the fingerprints already stored with orders carry: their keys keep replaying.
 */
function fingerprintOf(request: OrderRequest): string {
  const { lines, customerId, holdSeconds } = request;
  const asked =
    lines.length === 1 && customerId === undefined && holdSeconds === undefined
      ? [lines[0]!.sku, lines[0]!.quantity]
      : { lines, customerId: customerId ?? null, holdSeconds: holdSeconds ?? null };
  return createHash('sha256').update(JSON.stringify(asked)).digest('hex');
}

/**
 * Values no two orders of one batch may share: the Idempotency-Key (the later order will find the first's), and on a
 * limited SKU the customer (each customer's claim on a SKU is made once per statement).
 */
function exclusiveBy(request: OrderRequest, entries: SkuEntry[]): string[] {
  const values: string[] = [];
  if (request.idempotencyKey !== undefined) values.push(`key:${request.idempotencyKey}`);
  for (const entry of entries) {
    if (entry.maxPerCustomer !== null) values.push(`customer:${entry.sku}:${request.customerId}`);
  }
  return values;
}
