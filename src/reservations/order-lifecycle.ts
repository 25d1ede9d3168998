import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import type { Outbox, OutboxEvent } from '../events/outbox.js';
import { PeriodicJob } from '../events/periodic-job.js';
import type { OrderStatus } from '../db/schema.js';
import type { LockLease } from '../lock/distributed-lock.js';
import type { Logger } from '../logger.js';
import { findOrder, type OrderRecord } from '../orders/order.repository.js';
import { releaseUnits } from '../inventory/customer-holdings.repository.js';
import {
  confirmReservations,
  type DueUnits,
  expireReservations,
  findDueReservations,
  giveBack,
  lockOrderStatus,
  readOrderStatus,
  takeOffRunningTotal,
  readTakenUnits,
  setOrderStatus,
  type TakenUnits,
  uncountConfirmation,
  type UnitsBack,
} from './lifecycle.repository.js';
import { FencedOutError } from '../lock/errors.js';
import { lockBusy } from '../orders/outcome.js';
import { compareRefs, type SegmentLocks, type SegmentRef } from '../inventory/segment-locks.js';
import { splitEvenly } from '../inventory/segment-math.js';
import type { SkuDirectory, SkuEntry } from '../inventory/sku-directory.js';
import { StatementCombiner } from '../db/statement-combiner.js';

/**
 * Counter rows of `reservation_confirmations` per SKU: enough that concurrent confirm batches (of several instances)
 * rarely wait for each other's row lock, few enough that the SKU view's sum over them stays cheap.
 */
const CONFIRMATION_SLOTS = 16;
/** Most confirms one statement serves. */
const MAX_CONFIRM_BATCH = 256;
/** How often each instance looks for reservations whose hold ran out: well inside the 2 s promised. */
const SWEEP_INTERVAL_MS = 250;
/** Due reservations one sweep reads at once; it goes on with the next while they come full. */
const SWEEP_READ = 10_000;
/**
 * Expiry statements one instance runs at once, each on the segments of its own batch. A drop's admissions run out by
 * the thousand in one second; several statements on disjoint segments use more than one core of Postgres, and
 * instances sweeping together, each taking the batches in an order of its own, mostly work on different segments.
 */
const EXPIRIES_IN_FLIGHT = 4;

/**
 * What happens to an order after it was placed: confirm, cancel, expire.
 *
 * The order's row decides: every transition locks it and checks its status in the same transaction (a confirm: the
 * same statement) that applies the transition, so each happens at most once however many instances try, and a confirm racing an expiry has exactly
 * one winner. Units go back (cancel, expiry) under the locks of the segments they return to, fenced like an order's
 * write, in that transaction too: an instance killed midway rolls back, and the next sweep, on any instance, does it
 * again.
 */
export class OrderLifecycle {
  private readonly sweeps = new PeriodicJob(
    SWEEP_INTERVAL_MS,
    () => this.sweep(),
    (error) => this.log.warn({ err: error.message }, 'expiry sweep failed; retried on the next'),
  );
  /** Confirms queued while one statement runs go in the next: one commit for each batch. */
  private readonly confirms = new StatementCombiner<string, boolean>(async (orderIds) => {
    const slot = Math.floor(Math.random() * CONFIRMATION_SLOTS);
    const confirmed = await confirmReservations(this.db, orderIds, slot, this.outbox.enabled);
    return orderIds.map((id) => confirmed.has(id));
  }, MAX_CONFIRM_BATCH);

  constructor(
    private readonly db: Db,
    private readonly locks: SegmentLocks,
    private readonly directory: SkuDirectory,
    /** How long a return may wait for its segment locks. */
    private readonly lockWaitMs: number,
    private readonly outbox: Outbox,
    private readonly log: Logger,
  ) {}

  /** A reserved order becomes confirmed; confirming again is a no-op. */
  async confirm(orderId: string): Promise<OrderRecord> {
    if (!(await this.confirms.run(orderId))) {
      // Not a live reservation: already confirmed (answered as it is), or ended, or its hold ran out.
      const order = await readOrderStatus(this.db, orderId);
      if (!order) throw orderNotFound(orderId);
      if (order.status !== 'confirmed') {
        const orderStatus = order.status === 'reserved' ? 'expired' : order.status;
        throw new AppError('order_not_reserved', `order '${orderId}' is ${orderStatus}, not reserved`, { orderStatus });
      }
    }
    return this.read(orderId);
  }

  /**
   * A reserved or confirmed order becomes cancelled and its units go back; cancelling again is a no-op. A reservation
   * whose hold ran out expires instead (its units go back all the same), and the answer says so. Without
   * `allowConfirmed`, a confirmed order is refused (forbidden), decided under the order's row lock like the cancel.
   */
  async cancel(orderId: string, options: { allowConfirmed: boolean } = { allowConfirmed: true }): Promise<OrderRecord> {
    await this.end(orderId, options.allowConfirmed ? 'cancel' : 'cancel reservation');
    return this.read(orderId);
  }

  /** Starts expiring reservations, now (catching up on whatever fell due while no instance ran) and periodically. */
  start(): void {
    this.sweeps.start();
    this.sweeps.runNow();
  }

  /** Stops the sweeps and waits for one under way. */
  stop(): Promise<void> {
    return this.sweeps.stop();
  }

  /**
   * Expires what has fallen due, until none is left: each batch the reservations whose units go back to one set of
   * segments, several batches at once. Another instance's sweep may take the same orders, and only one ends each.
   */
  async sweep(): Promise<void> {
    for (;;) {
      let due: DueUnits[];
      try {
        due = await findDueReservations(this.db, SWEEP_READ);
      } catch (error) {
        this.log.warn({ err: (error as Error).message }, 'expiry sweep could not read due reservations');
        return;
      }
      const batches = batchesBySegments(due);
      if (batches.length === 0) return;
      let failed = false;
      let next = 0;
      const worker = async () => {
        while (next < batches.length) {
          const batch = batches[next++]!;
          await this.expireBatch(batch).catch((error: unknown) => {
            failed = true;
            this.log.warn({ err: (error as Error).message }, 'reservations not expired yet; retried next sweep');
          });
        }
      };
      await Promise.all(Array.from({ length: Math.min(EXPIRIES_IN_FLIGHT, batches.length) }, worker));
      if (failed || new Set(due.map((d) => d.orderId)).size < SWEEP_READ) return;
    }
  }

  /**
   * Ends a batch of due reservations in one statement (`expireReservations`) under the locks of every segment their
   * units go back to, taken in the global lock order; starts over when a lock was lost or a layout changed. An order
   * with units from a replaced layout goes back spread over the current one, and is ended on its own, as a cancel is.
   */
  private async expireBatch(due: DueUnits[]): Promise<void> {
    const deadline = Date.now() + this.lockWaitMs;
    for (;;) {
      const skus = [...new Set(due.map((d) => d.sku))];
      const entries = new Map((await Promise.all(skus.map((sku) => this.directory.get(sku)))).map((e) => [e.sku, e]));
      const moved = new Set(
        due.filter((d) => d.layoutVersion !== entries.get(d.sku)!.layoutVersion).map((d) => d.orderId),
      );
      const inLayout = due.filter((d) => !moved.has(d.orderId));
      const refs = [
        ...new Map(
          inLayout.map((d): [string, SegmentRef] => [
            `${d.sku}\n${d.segment}`,
            { sku: d.sku, layoutVersion: d.layoutVersion, segment: d.segment },
          ]),
        ).values(),
      ].sort(compareRefs);
      let ended: boolean | 'retry' = false;
      if (refs.length > 0) {
        const leases = await this.locks.acquireInOrder(refs, deadline, this.locks.ticket());
        if (!leases) throw lockBusy(this.lockWaitMs);
        try {
          ended = await this.db.transaction().execute(async (trx) => {
            const fences = refs.map((ref, i) => ({
              skuId: entries.get(ref.sku)!.id,
              layoutVersion: ref.layoutVersion,
              segment: ref.segment,
              fence: leases[i]!.fence,
            }));
            const orderIds = [...new Set(inLayout.map((d) => d.orderId))];
            const result = await expireReservations(trx, orderIds, fences, this.outbox.enabled);
            if (result.written !== result.segments) throw new FencedOutError();
            return result.expired > 0;
          });
        } catch (error) {
          // A lock was lost, or the layout changed since this instance looked: nothing was written.
          if (!(error instanceof FencedOutError)) throw error;
          ended = 'retry';
        } finally {
          await this.locks.releaseAll(leases);
        }
      }
      if (ended === 'retry') {
        for (const entry of entries.values()) this.directory.invalidate(entry);
        if (Date.now() >= deadline) throw lockBusy(this.lockWaitMs);
        continue;
      }
      // Segments that were empty hold stock again: every instance drops what it knew of these SKUs.
      if (ended) await Promise.all([...entries.keys()].map((sku) => this.directory.announceChange(sku)));
      for (const orderId of moved) await this.end(orderId, 'expire');
      return;
    }
  }

  private async read(orderId: string): Promise<OrderRecord> {
    const order = await findOrder(this.db, { id: orderId });
    if (!order) throw orderNotFound(orderId);
    return order;
  }

  /**
   * Ends the order if it is still live: `cancel` ends a reserved or confirmed one, `cancel reservation` a reserved one
   * (refusing a confirmed one), `expire` only a reservation whose hold ran out (as do both cancels, then). Takes the locks of the segments the units go back to, in the global lock
   * order, then decides and writes in one transaction; starts over when a lock was lost or the layout changed.
   */
  private async end(orderId: string, intent: 'cancel' | 'cancel reservation' | 'expire'): Promise<void> {
    const deadline = Date.now() + this.lockWaitMs;
    // Every order has ledger rows: none means no such order.
    const taken = await readTakenUnits(this.db, orderId);
    if (taken.length === 0) throw orderNotFound(orderId);
    for (;;) {
      const entries = await Promise.all([...new Set(taken.map((t) => t.sku))].map((sku) => this.directory.get(sku)));
      const back = entries.flatMap((entry) => unitsBackTo(entry, taken));
      const refs = back.map((b) => b.ref).sort(compareRefs);
      const leases = await this.locks.acquireInOrder(refs, deadline, this.locks.ticket());
      if (!leases) throw lockBusy(this.lockWaitMs);
      let ended: boolean | 'retry';
      try {
        ended = await this.db.transaction().execute(async (trx) => {
          const order = await lockOrderStatus(trx, orderId);
          if (!order) throw orderNotFound(orderId);
          const live = order.status === 'reserved' || order.status === 'confirmed';
          const expiring = order.status === 'reserved' && order.due;
          if (!live || (intent === 'expire' && !expiring)) return false;
          if (intent === 'cancel reservation' && order.status === 'confirmed') {
            throw new AppError(
              'forbidden',
              `order '${orderId}' is confirmed; this caller may cancel reservations only`,
            );
          }
          const reason = expiring ? 'expired' : 'cancelled';
          await setOrderStatus(trx, orderId, reason);
          const units = withFences(back, refs, leases);
          if ((await giveBack(trx, orderId, reason, units)) !== units.length) throw new FencedOutError();
          // A reservation's units sit in `reserved`, confirmed since or not; a confirmation was counted apart.
          const wasReservation = order.status === 'reserved' || order.confirmedSlot !== null;
          await takeOffRunningTotal(trx, orderId, wasReservation ? 'reserved' : 'sold');
          if (order.confirmedSlot !== null) await uncountConfirmation(trx, order.confirmedSlot, taken);
          await this.outbox.write(trx, endedEvents(orderId, reason, order.status, entries, taken));
          if (order.customerId !== null) {
            for (const entry of entries) {
              const units = taken.filter((t) => t.skuId === entry.id).reduce((total, t) => total + t.quantity, 0);
              await releaseUnits(trx, entry.id, order.customerId, units);
            }
          }
          return true;
        });
      } catch (error) {
        // A lock was lost, or the layout changed since this instance looked: nothing was written.
        if (!(error instanceof FencedOutError)) throw error;
        ended = 'retry';
      } finally {
        await this.locks.releaseAll(leases);
      }
      if (ended !== 'retry') {
        // Segments that were empty hold stock again: every instance drops what it knew of these SKUs.
        if (ended) await Promise.all(entries.map((entry) => this.directory.announceChange(entry.sku)));
        return;
      }
      for (const entry of entries) this.directory.invalidate(entry);
      if (Date.now() >= deadline) throw lockBusy(this.lockWaitMs);
    }
  }
}

/**
 * Due reservations in batches by the segments their units came from (each order in one batch, with every ledger row
 * it has), in an order of this instance's own: batches on disjoint segments take disjoint locks and run side by side.
 */
function batchesBySegments(due: DueUnits[]): DueUnits[][] {
  const byOrder = new Map<string, DueUnits[]>();
  for (const row of due) {
    const rows = byOrder.get(row.orderId);
    if (rows) rows.push(row);
    else byOrder.set(row.orderId, [row]);
  }
  const bySegments = new Map<string, DueUnits[]>();
  for (const rows of byOrder.values()) {
    const key = [...new Set(rows.map((r) => `${r.skuId}/${r.layoutVersion}/${r.segment}`))].sort().join(' ');
    const batch = bySegments.get(key);
    if (batch) batch.push(...rows);
    else bySegments.set(key, [...rows]);
  }
  return [...bySegments.values()].sort(() => Math.random() - 0.5);
}

/**
 * Where a SKU's units of an order go back to: the segments they came from while the layout is the one they were
 * taken from; otherwise spread evenly over the current layout.
 */
function unitsBackTo(entry: SkuEntry, taken: TakenUnits[]): { ref: SegmentRef; skuId: number; quantity: number }[] {
  const mine = taken.filter((t) => t.skuId === entry.id);
  const ref = (segment: number) => ({ sku: entry.sku, layoutVersion: entry.layoutVersion, segment });
  if (mine.every((t) => t.layoutVersion === entry.layoutVersion)) {
    return mine.map((t) => ({ ref: ref(t.segment), skuId: entry.id, quantity: t.quantity }));
  }
  const total = mine.reduce((sum, t) => sum + t.quantity, 0);
  return splitEvenly(total, entry.segmentCount)
    .map((quantity, segment) => ({ ref: ref(segment), skuId: entry.id, quantity }))
    .filter((b) => b.quantity > 0);
}

/** One `order.cancelled` or `order.expired` event per SKU of the order: its units back from reserved or sold. */
function endedEvents(
  orderId: string,
  reason: 'cancelled' | 'expired',
  wasStatus: OrderStatus,
  entries: SkuEntry[],
  taken: TakenUnits[],
): OutboxEvent[] {
  return entries.map((entry) => {
    const quantity = taken.filter((t) => t.skuId === entry.id).reduce((total, t) => total + t.quantity, 0);
    return {
      skuId: entry.id,
      type: reason === 'expired' ? 'order.expired' : 'order.cancelled',
      data: { order: { orderId, status: reason, previousStatus: wasStatus, quantity } },
      available: quantity,
      ...(wasStatus === 'confirmed' ? { sold: -quantity } : { reserved: -quantity }),
    };
  });
}

function withFences(
  back: { ref: SegmentRef; skuId: number; quantity: number }[],
  refs: SegmentRef[],
  leases: LockLease[],
): UnitsBack[] {
  return back.map(({ ref, skuId, quantity }) => ({
    skuId,
    layoutVersion: ref.layoutVersion,
    segment: ref.segment,
    quantity,
    fence: leases[refs.indexOf(ref)]!.fence,
  }));
}

function orderNotFound(orderId: string): AppError {
  return new AppError('order_not_found', `order '${orderId}' does not exist`);
}
