import type { Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database, SkuRow } from '../db/schema.js';
import { AppError } from '../errors.js';
import type { Outbox } from '../events/outbox.js';
import type { LockLease } from '../lock/distributed-lock.js';
import {
  addToSegmentsFenced,
  deleteSegmentsFenced,
  findSkuForUpdate,
  insertSegments,
  insertSku,
  readSegmentsForUpdate,
  recordAddition,
  recordStockChange,
  type StockChange,
  updateSkuLayout,
} from './stock.repository.js';
import { type AdminAnswer, type AdminRequest, answerOnce, insertAdminRequest } from './admin-requests.repository.js';
import { recountHoldings } from '../inventory/customer-holdings.repository.js';
import { FencedOutError } from '../lock/errors.js';
import { lockBusy } from '../orders/outcome.js';
import type { SegmentLocks } from '../inventory/segment-locks.js';
import { splitEvenly } from '../inventory/segment-math.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import { refOf, type SkuDirectory, type SkuEntry } from '../inventory/sku-directory.js';
import { readSkuView, type SkuView } from './sku-view.js';
import type { Movement } from './movement.js';

/** Σ stock ever added per SKU stays an exact double, with room for every sum the service computes. */
export const MAX_TOTAL_STOCK = 2 ** 52;

/**
 * What PATCH /skus/:sku changes (and what a create may set): any of the limit, the low-stock threshold and the window's
 * ends (RFC 3339); null removes that one.
 */
export interface SkuChanges {
  maxPerCustomer?: number | null | undefined;
  lowStockThreshold?: number | null | undefined;
  saleStartsAt?: string | null | undefined;
  saleEndsAt?: string | null | undefined;
}

/** Why and by whom an adjustment or a counted set is made. */
export interface StockChangeDetails {
  reason: string;
  note?: string | undefined;
  reference?: string | undefined;
  /** The credential making the change. */
  actor: string;
}

type Change = (
  trx: Transaction<Database>,
  row: SkuRow,
  leases: LockLease[],
) => Promise<boolean | { movement: Movement }>;

/**
 * Configuration changes of a SKU: create, restock, re-segment, set its per-customer limit or its sale window. Restock,
 * re-segment and limit changes take every segment lock of the current layout in the global lock order (so no deadlock) and write
 * fenced, so they never interleave with an order's read-decide-write. Each accepts an Idempotency-Key: the key and the answer are
 * written in the change's own transaction, so a retry replays the answer and applies nothing, and of two requests
 * racing with one key exactly one applies.
 */
export class StockAdmin {
  constructor(
    private readonly db: Db,
    private readonly locks: SegmentLocks,
    private readonly directory: SkuDirectory,
    /** Tells whether a SKU is on sale now. */
    private readonly clock: SharedClock,
    /** How long a configuration change may wait for the segment locks. */
    private readonly lockWaitMs: number,
    private readonly outbox: Outbox,
  ) {}

  create(
    input: { sku: string; stock: number; segments: number } & SkuChanges,
    request?: AdminRequest,
  ): Promise<AdminAnswer> {
    return answerOnce(this.db, request, async () => {
      let view: AdminAnswer['view'] | undefined;
      try {
        view = await this.db.transaction().execute(async (trx) => {
          const row = await insertSku(trx, {
            sku: input.sku,
            segmentShares: splitEvenly(input.stock, input.segments),
            totalStock: input.stock,
            maxPerCustomer: input.maxPerCustomer ?? null,
            lowStockThreshold: input.lowStockThreshold ?? null,
            saleStartsAt: instant(input.saleStartsAt),
            saleEndsAt: instant(input.saleEndsAt),
          });
          const settings = {
            stock: input.stock,
            segments: input.segments,
            maxPerCustomer: row.max_per_customer,
            lowStockThreshold: row.low_stock_threshold,
            saleStartsAt: row.sale_starts_at?.toISOString() ?? null,
            saleEndsAt: row.sale_ends_at?.toISOString() ?? null,
          };
          await this.outbox.write(trx, [
            { skuId: row.id, type: 'sku.created', data: { sku: settings }, available: input.stock },
          ]);
          return this.record(trx, input.sku, request, 201);
        });
      } catch (error) {
        if ((error as { code?: string; constraint?: string }).constraint === 'skus_sku_key') {
          throw new AppError('sku_exists', `SKU '${input.sku}' already exists`);
        }
        throw error;
      }
      await this.directory.announceChange(input.sku);
      return { status: 201, view: view ?? (await this.view(input.sku)), replayed: false };
    });
  }

  /** The SKU's books as they are now (inside a change: as its transaction `db` sees them). */
  view(sku: string, db: Db = this.db): Promise<SkuView> {
    return readSkuView(db, this.clock, sku);
  }

  restock(sku: string, quantity: number, request?: AdminRequest): Promise<AdminAnswer> {
    return this.changeUnderAllLocks(sku, request, async (trx, row, leases) => {
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
      await this.outbox.write(trx, [
        {
          skuId: row.id,
          type: 'sku.restocked',
          data: { restock: { quantity, stock: totalStock } },
          available: quantity,
        },
      ]);
      return true;
    });
  }

  /**
   * Adds (`delta` > 0, spread like a restock) or removes units. A removal is taken from the segments under every
   * segment lock, as what they hold then, fenced like a restock; more than is available is refused whole (409
   * `out_of_stock` with what is available).
   */
  adjust(sku: string, input: StockChangeDetails & { delta: number }, request?: AdminRequest): Promise<AdminAnswer> {
    return this.changeStock(sku, 'adjustment', input, request, (available) => {
      if (available + input.delta < 0) {
        throw new AppError(
          'out_of_stock',
          `SKU '${sku}' has ${available} unit(s) available, ${-input.delta} to remove`,
          { sku, available },
        );
      }
      return input.delta;
    });
  }

  /**
   * Sets what is available to a counted quantity, if it is still `compareAvailable` under every segment lock (else
   * 409 `stale_count` with the current value); without a compare, whatever it is. Reserved and sold units are not
   * touched: the difference is recorded as the count's movement.
   */
  count(
    sku: string,
    input: StockChangeDetails & { available: number; compareAvailable?: number | undefined },
    request?: AdminRequest,
  ): Promise<AdminAnswer> {
    return this.changeStock(sku, 'count', input, request, (available) => {
      if (input.compareAvailable !== undefined && input.compareAvailable !== available) {
        throw new AppError(
          'stale_count',
          `SKU '${sku}' has ${available} unit(s) available, not ${input.compareAvailable}`,
          { sku, available },
        );
      }
      return input.available - available;
    });
  }

  /**
   * An adjustment or a count: under every segment lock, reads what the segments hold, asks `deltaFrom` how many units
   * to add (negative: remove), and writes them fenced with their movement and event in one transaction.
   */
  private changeStock(
    sku: string,
    kind: StockChange['kind'],
    details: StockChangeDetails,
    request: AdminRequest | undefined,
    deltaFrom: (available: number) => number,
  ): Promise<AdminAnswer> {
    return this.changeUnderAllLocks(sku, request, async (trx, row, leases) => {
      const layout = { skuId: row.id, layoutVersion: row.layout_version };
      const held = new Map((await readSegmentsForUpdate(trx, layout)).map((s) => [s.segment, s.available]));
      const holdings = leases.map((_, segment) => held.get(segment) ?? 0);
      const available = holdings.reduce((total, units) => total + units, 0);
      const delta = deltaFrom(available);
      const totalStock = row.total_stock + delta;
      if (totalStock > MAX_TOTAL_STOCK) {
        throw new AppError('stock_limit_exceeded', `total stock would exceed ${MAX_TOTAL_STOCK}`);
      }
      const shares = delta >= 0 ? splitEvenly(delta, row.segment_count) : takeFrom(holdings, -delta).map((n) => -n);
      const writes = leases.map((lease, segment) => ({ segment, fence: lease.fence, add: shares[segment]! }));
      if ((await addToSegmentsFenced(trx, layout, writes)) !== writes.length) return false;
      await updateSkuLayout(trx, row.id, { totalStock });
      const change: StockChange = {
        kind,
        quantity: delta,
        reason: details.reason,
        actor: details.actor,
        note: details.note ?? null,
        reference: details.reference ?? null,
        availableAfter: available + delta,
      };
      const { id, createdAt } = await recordStockChange(trx, row.id, change);
      const { kind: _kind, availableAfter: _after, ...described } = change;
      await this.outbox.write(trx, [
        {
          skuId: row.id,
          type: kind === 'adjustment' ? 'sku.adjusted' : 'sku.counted',
          data: { [kind]: { ...described, stock: totalStock } },
          available: delta,
        },
      ]);
      return {
        movement: {
          id: String(id),
          kind,
          quantity: delta,
          reason: change.reason,
          actor: change.actor,
          note: change.note,
          reference: change.reference,
          orderId: null,
          availableAfter: change.availableAfter,
          at: createdAt.toISOString(),
        },
      };
    });
  }

  resegment(sku: string, segmentCount: number, request?: AdminRequest): Promise<AdminAnswer> {
    return this.changeUnderAllLocks(sku, request, async (trx, row, leases) => {
      const writes = leases.map((lease, segment) => ({ segment, fence: lease.fence }));
      const removed = await deleteSegmentsFenced(trx, { skuId: row.id, layoutVersion: row.layout_version }, writes);
      if (removed.length !== writes.length) return false;
      const available = removed.reduce((total, s) => total + s.available, 0);
      // What the old segments sold and reserved moves to the SKU row, so the view's running totals survive the new
      // layout (confirming or ending an order of the old layout counts there).
      const soldInEarlierLayouts = row.sold_in_earlier_layouts + removed.reduce((total, s) => total + s.sold, 0);
      const reservedInEarlierLayouts =
        row.reserved_in_earlier_layouts + removed.reduce((total, s) => total + s.reserved, 0);
      const layoutVersion = row.layout_version + 1;
      await insertSegments(trx, row.id, layoutVersion, splitEvenly(available, segmentCount));
      await updateSkuLayout(trx, row.id, {
        segmentCount,
        layoutVersion,
        soldInEarlierLayouts,
        reservedInEarlierLayouts,
      });
      await this.outbox.write(trx, [
        {
          skuId: row.id,
          type: 'sku.resegmented',
          data: { resegment: { segments: segmentCount, previousSegments: row.segment_count } },
        },
      ]);
      return true;
    });
  }

  /**
   * Changes the per-customer limit, the low-stock threshold and/or the sale window (PATCH), whichever `changes`
   * names. A limit or threshold is set under every segment lock, so no order of the SKU commits meanwhile: the
   * customers' holdings are recounted from their live orders, and orders placed while there was no limit count
   * towards the new one. A window alone needs no segment lock: orders check it before any lock, and every instance
   * hears of the change through the SKU's change notice.
   */
  update(sku: string, changes: SkuChanges, request?: AdminRequest): Promise<AdminAnswer> {
    const setWindow = async (trx: Transaction<Database>, row: SkuRow) => {
      const saleStartsAt = changes.saleStartsAt === undefined ? row.sale_starts_at : instant(changes.saleStartsAt);
      const saleEndsAt = changes.saleEndsAt === undefined ? row.sale_ends_at : instant(changes.saleEndsAt);
      if (saleStartsAt && saleEndsAt && saleEndsAt <= saleStartsAt) {
        throw new AppError(
          'bad_request',
          `saleEndsAt must be after saleStartsAt (${saleStartsAt.toISOString()}, ${saleEndsAt.toISOString()})`,
        );
      }
      await updateSkuLayout(trx, row.id, { saleStartsAt, saleEndsAt });
    };
    const { maxPerCustomer, lowStockThreshold } = changes;
    if (maxPerCustomer === undefined && lowStockThreshold === undefined) {
      return answerOnce(this.db, request, async () => {
        const view = await this.db.transaction().execute(async (trx) => {
          const entry = await this.directory.get(sku);
          const row = await findSkuForUpdate(trx, entry.id);
          if (!row) throw new AppError('sku_not_found', `SKU '${sku}' does not exist`);
          await setWindow(trx, row);
          return this.record(trx, sku, request, 200);
        });
        await this.directory.announceChange(sku);
        return { status: 200, view: view ?? (await this.view(sku)), replayed: false };
      });
    }
    return this.changeUnderAllLocks(sku, request, async (trx, row) => {
      await setWindow(trx, row);
      await updateSkuLayout(trx, row.id, { maxPerCustomer, lowStockThreshold });
      if (maxPerCustomer !== undefined) {
        if (maxPerCustomer !== null) await recountHoldings(trx, row.id);
        await this.outbox.write(trx, [
          { skuId: row.id, type: 'sku.limit_changed', data: { limit: { maxPerCustomer } } },
        ]);
      }
      if (lowStockThreshold !== undefined) {
        await this.outbox.write(trx, [
          { skuId: row.id, type: 'sku.threshold_changed', data: { threshold: { lowStockThreshold } } },
        ]);
      }
      return true;
    });
  }

  /** With a key: the SKU as the change left it, stored as the answer in the change's transaction. */
  private async record(
    trx: Transaction<Database>,
    sku: string,
    request: AdminRequest | undefined,
    status: number,
    movement?: Movement,
  ): Promise<AdminAnswer['view'] | undefined> {
    if (!request) return undefined;
    const view = { ...(await this.view(sku, trx)), ...(movement && { movement }) };
    await insertAdminRequest(trx, request.key, { fingerprint: request.fingerprint, status, response: view });
    return view;
  }

  /**
   * Runs `change` in a transaction while holding every segment lock of the SKU's current layout. `change` returns
   * false when a fenced write was refused (a lock was lost): everything is rolled back and tried again.
   */
  private changeUnderAllLocks(sku: string, request: AdminRequest | undefined, change: Change): Promise<AdminAnswer> {
    return answerOnce(this.db, request, async () => {
      const { view, movement } = await this.changeOnce(sku, request, change);
      return {
        status: 200,
        view: view ?? { ...(await this.view(sku)), ...(movement && { movement }) },
        replayed: false,
      };
    });
  }

  private async changeOnce(
    sku: string,
    request: AdminRequest | undefined,
    change: Change,
  ): Promise<{ view: AdminAnswer['view'] | undefined; movement: Movement | undefined }> {
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
            const changed = await change(trx, row, leases);
            if (changed === false) throw new FencedOutError();
            const movement = typeof changed === 'object' ? changed.movement : undefined;
            return { view: await this.record(trx, sku, request, 200, movement), movement };
          })
          .catch((error: unknown) => {
            if (error instanceof FencedOutError) return 'fenced-out' as const;
            throw error;
          });
        if (typeof applied === 'object') {
          await this.directory.announceChange(sku);
          return applied;
        }
        this.directory.invalidate(entry);
      } finally {
        await this.locks.releaseAll(leases);
      }
      if (Date.now() >= deadline) throw lockBusy(this.lockWaitMs);
    }
  }

  private async acquireAll(entry: SkuEntry, deadline: number): Promise<LockLease[]> {
    const refs = Array.from({ length: entry.segmentCount }, (_, segment) => refOf(entry, segment));
    const leases = await this.locks.acquireInOrder(refs, deadline, this.locks.ticket());
    if (!leases) throw lockBusy(this.lockWaitMs);
    return leases;
  }
}

/** How many units to take from each segment to remove `quantity` of what they hold: the fullest first. */
function takeFrom(holdings: number[], quantity: number): number[] {
  const taken = holdings.map(() => 0);
  let left = quantity;
  for (const segment of holdings.map((_, i) => i).sort((a, b) => holdings[b]! - holdings[a]!)) {
    if (left === 0) break;
    taken[segment] = Math.min(left, holdings[segment]!);
    left -= taken[segment];
  }
  return taken;
}

function instant(text: string | null | undefined): Date | null {
  return text ? new Date(text) : null;
}
