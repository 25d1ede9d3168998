import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from '../db/database.js';
import { AppError, FencedOutError } from '../errors.js';
import { type SegmentRef, unlockNotice } from '../lock/keys.js';
import type { Lease, SegmentLock } from '../lock/segment-lock.js';
import type { UnlockWaiters } from '../lock/unlock-waiters.js';
import { findOrder, isIdempotencyConflict, type OrderRecord } from '../orders/order.repository.js';
import { commitDeduction, type DeductionCommit } from './deduction.repository.js';
import { readSegment, readSegments, type SegmentState } from './inventory.repository.js';
import { chooseSegmentsToCover, rotate, type SegmentTake, splitAcross } from './segment-math.js';
import { SegmentMemory } from './segment-memory.js';
import type { SkuDirectory, SkuEntry } from './sku-directory.js';

export interface OrderRequest {
  sku: string;
  quantity: number;
  idempotencyKey?: string;
}

export interface PlacedOrder {
  order: OrderRecord;
  /** True when an earlier request with the same Idempotency-Key already placed this order. */
  replayed: boolean;
}

export interface OrderPlacementOptions {
  lockWaitMs: number;
  /** Benchmark knob: a simulated business step inside the lock. */
  criticalSectionDelayMs: number;
}

/** Observers of the flow (metrics); every hook is optional and must not throw. */
export interface OrderFlowHooks {
  onSegmentVisit?(sku: string): void;
  onLockBusy?(sku: string): void;
  onWait?(sku: string, waitedMs: number): void;
  onFencedOut?(sku: string): void;
  onLockLost?(sku: string): void;
}

/** Why an attempt ended without an answer: the caller starts over with a fresh view of the SKU. */
type Restart = { restart: 'layout-changed' | 'fenced-out' | 'lock-lost' | 'lost-race' };

/**
 * The order flow: pick a random segment, try its lock without waiting, read and decide under the lock, write fenced.
 * Moves to the next segment when one is busy or short; covers an order from several segments, locked in ascending
 * order, when no single one suffices; refuses only when the stock it read under locks falls short.
 */
export class OrderPlacement {
  private readonly memory = new SegmentMemory();

  constructor(
    private readonly db: Db,
    private readonly lock: SegmentLock,
    private readonly waiters: UnlockWaiters,
    private readonly directory: SkuDirectory,
    private readonly options: OrderPlacementOptions,
    private readonly hooks: OrderFlowHooks = {},
  ) {}

  async place(request: OrderRequest): Promise<PlacedOrder> {
    const fingerprint = request.idempotencyKey ? fingerprintOf(request) : null;
    if (request.idempotencyKey) {
      const prior = await findOrder(this.db, { idempotencyKey: request.idempotencyKey });
      if (prior) return replay(prior, fingerprint);
    }
    const deadline = Date.now() + this.options.lockWaitMs;
    for (;;) {
      const entry = await this.directory.get(request.sku);
      const outcome = await this.attempt(entry, request, fingerprint, deadline);
      if ('order' in outcome) return { order: outcome.order, replayed: false };
      if (outcome.restart === 'lost-race') {
        const winner = await findOrder(this.db, { idempotencyKey: request.idempotencyKey! });
        if (winner) return replay(winner, fingerprint);
      }
      if (outcome.restart === 'layout-changed') this.directory.invalidate(entry);
      if (Date.now() >= deadline) throw lockBusy(this.options.lockWaitMs);
    }
  }

  private async attempt(
    entry: SkuEntry,
    request: OrderRequest,
    fingerprint: string | null,
    deadline: number,
  ): Promise<{ order: OrderRecord } | Restart> {
    const { quantity } = request;
    /** Latest stock read under each segment's lock in this attempt; stock only shrinks, so these are upper bounds. */
    const seen = new Map<number, number>();
    const since = Date.now();
    // When this process holds every segment and others of its callers already wait, a newcomer queues behind them
    // instead of overtaking (the single-lock case stays first come, first served).
    let queueFirst =
      this.waiters.hasWaiters(entry.sku) &&
      range(entry.segmentCount).every((s) => entry.emptySegments.has(s) || this.lock.isHeldHere(refOf(entry, s)));
    let listening = false;
    let queued: boolean;
    /** The segment whose release woke this caller: tried first in the next pass. */
    let wokenFor: number | undefined;
    for (let round = 0; ; round++) {
      if (entry.stale) return { restart: 'layout-changed' };
      if (round > 0 && Date.now() >= deadline) throw lockBusy(this.options.lockWaitMs);
      const mark = this.waiters.mark();
      const available = range(entry.segmentCount).filter((s) => !entry.emptySegments.has(s));
      const start = wokenFor !== undefined ? available.indexOf(wokenFor) : -1;
      const candidates = rotate(available, start >= 0 ? start : Math.floor(Math.random() * available.length));
      const busy: number[] = [];
      for (const segment of candidates) {
        const known = seen.get(segment);
        if (known !== undefined && known < quantity) continue;
        if (queueFirst) {
          busy.push(segment);
          continue;
        }
        this.hooks.onSegmentVisit?.(entry.sku);
        const lease = await this.lock.tryAcquire(refOf(entry, segment));
        if (!lease) {
          this.hooks.onLockBusy?.(entry.sku);
          busy.push(segment);
          continue;
        }
        try {
          const state =
            this.memory.recall(lease) ??
            (await readSegment(this.db, { skuId: entry.id, layoutVersion: entry.layoutVersion, segment }));
          if (state === undefined) return { restart: 'layout-changed' };
          this.memory.remember(lease, state);
          if (state.available >= quantity) {
            return await this.commit(entry, request, fingerprint, [{ lease, state, take: quantity }]);
          }
          seen.set(segment, state.available);
          if (state.available === 0) this.markEmpty(entry, segment);
        } finally {
          // After a commit too: a release that fails only leaves the lease to expire, never undoes the order.
          await this.lock.releaseQuietly([lease]);
        }
      }
      queued = queueFirst;
      queueFirst = false;

      const unseenBusy = busy.filter((s) => !seen.has(s));
      const seenStock = [...seen].map(([segment, available]) => ({ segment, available }));
      const cover = chooseSegmentsToCover(seenStock, quantity);
      if (cover) {
        const outcome = await this.commitAcross(entry, request, fingerprint, cover, seen, deadline);
        if (outcome) return outcome;
        continue;
      }
      if (unseenBusy.length === 0) {
        throw outOfStock(entry.sku, quantity, sum(seen.values()));
      }
      if (!listening) {
        await this.waiters.prepare(entry.sku);
        listening = true;
        // A release between the pass above and subscribing would be missed: look once more before waiting.
        if (!queued) continue;
      }
      const segmentOfNotice = new Map(busy.map((segment) => [unlockNotice.encode(refOf(entry, segment)), segment]));
      const started = Date.now();
      const notice = await this.waiters.wait(entry.sku, new Set(segmentOfNotice.keys()), {
        since,
        timeoutMs: deadline - started,
        mark,
      });
      wokenFor = notice === undefined ? undefined : segmentOfNotice.get(notice);
      this.hooks.onWait?.(entry.sku, Date.now() - started);
    }
  }

  /**
   * Covers the order from several segments: their locks in ascending order (so two such orders cannot deadlock),
   * a fresh read under all of them, one transaction. Undefined when stock moved meanwhile; `seen` is updated.
   */
  private async commitAcross(
    entry: SkuEntry,
    request: OrderRequest,
    fingerprint: string | null,
    segments: number[],
    seen: Map<number, number>,
    deadline: number,
  ): Promise<{ order: OrderRecord } | Restart | undefined> {
    const leases: Lease[] = [];
    try {
      for (const segment of segments) {
        const lease = await this.lock.acquire(refOf(entry, segment), deadline);
        if (!lease) throw lockBusy(this.options.lockWaitMs);
        leases.push(lease);
      }
      const states = await readSegments(this.db, { skuId: entry.id, layoutVersion: entry.layoutVersion, segments });
      if (states.length !== segments.length) return { restart: 'layout-changed' };
      for (const [i, lease] of leases.entries()) this.memory.remember(lease, states[i]!);
      for (const { segment, available } of states) {
        seen.set(segment, available);
        if (available === 0) this.markEmpty(entry, segment);
      }
      const takes = splitAcross(states, request.quantity);
      if (!takes) return undefined;
      const stateOf = new Map(states.map((s) => [s.segment, s]));
      const leaseOf = new Map(leases.map((l) => [l.ref.segment, l]));
      return await this.commit(
        entry,
        request,
        fingerprint,
        takes.map((t) => ({ lease: leaseOf.get(t.segment)!, state: stateOf.get(t.segment)!, take: t.quantity })),
      );
    } finally {
      await this.lock.releaseQuietly(leases);
    }
  }

  /**
   * An empty segment is skipped from now on, so no later release of it would wake those waiting for it: wake them
   * all now, to look elsewhere or conclude the stock is gone.
   */
  private markEmpty(entry: SkuEntry, segment: number): void {
    if (this.directory.markEmpty(entry, segment)) {
      this.waiters.wakeAll(entry.sku, unlockNotice.encode(refOf(entry, segment)));
    }
  }

  /** The write half of the critical section: fenced segment updates, the order and its ledger, one transaction. */
  private async commit(
    entry: SkuEntry,
    request: OrderRequest,
    fingerprint: string | null,
    takes: { lease: Lease; state: SegmentState; take: number }[],
  ): Promise<{ order: OrderRecord } | Restart> {
    const lockLost = AbortSignal.any(takes.map(({ lease }) => lease.signal));
    if (this.options.criticalSectionDelayMs > 0) {
      await sleep(this.options.criticalSectionDelayMs, undefined, { signal: lockLost }).catch(() => undefined);
    }
    if (lockLost.aborted) {
      // The watchdog could not keep a lease: do not even try the write (the fence would refuse it anyway).
      for (const { lease } of takes) this.memory.forget(lease);
      this.hooks.onLockLost?.(entry.sku);
      return { restart: 'lock-lost' };
    }
    const id = randomUUID();
    const commit: DeductionCommit = {
      orderId: id,
      skuId: entry.id,
      layoutVersion: entry.layoutVersion,
      quantity: request.quantity,
      idempotencyKey: request.idempotencyKey ?? null,
      requestFingerprint: fingerprint,
      deductions: takes.map(({ lease, state, take }) => ({
        segment: state.segment,
        availableSeen: state.available,
        fenceSeen: state.fence,
        fence: lease.fence,
        quantity: take,
      })),
    };
    let createdAt: Date;
    try {
      createdAt =
        takes.length === 1
          ? requireAllWritten(await commitDeduction(this.db, commit), commit)
          : await this.db
              .transaction()
              .execute(async (trx) => requireAllWritten(await commitDeduction(trx, commit), commit));
    } catch (error) {
      for (const { lease } of takes) this.memory.forget(lease);
      if (error instanceof FencedOutError) {
        this.hooks.onFencedOut?.(entry.sku);
        return { restart: 'fenced-out' };
      }
      if (isIdempotencyConflict(error)) return { restart: 'lost-race' };
      throw error;
    }
    for (const { lease, state, take } of takes) {
      this.memory.remember(lease, { segment: state.segment, available: state.available - take, fence: lease.fence });
      if (state.available === take) this.markEmpty(entry, state.segment);
    }
    const deductions: SegmentTake[] = takes.map(({ lease, take }) => ({ segment: lease.ref.segment, quantity: take }));
    return {
      order: {
        id,
        sku: entry.sku,
        quantity: request.quantity,
        idempotencyKey: request.idempotencyKey ?? null,
        requestFingerprint: fingerprint,
        createdAt,
        deductions,
      },
    };
  }
}

/** The order's creation time; throws (rolling back a surrounding transaction) when a fenced write was refused. */
function requireAllWritten(result: { written: number; createdAt: Date | null }, commit: DeductionCommit): Date {
  if (result.createdAt === null) throw new FencedOutError(commit.deductions.map((d) => d.segment));
  return result.createdAt;
}

function replay(prior: OrderRecord, fingerprint: string | null): PlacedOrder {
  if (prior.requestFingerprint !== fingerprint) {
    throw new AppError('idempotency_key_reused', 'this Idempotency-Key was used for a different order request');
  }
  return { order: prior, replayed: true };
}

function fingerprintOf(request: OrderRequest): string {
  return createHash('sha256')
    .update(JSON.stringify([request.sku, request.quantity]))
    .digest('hex');
}

function refOf(entry: SkuEntry, segment: number): SegmentRef {
  return { sku: entry.sku, layoutVersion: entry.layoutVersion, segment };
}

function outOfStock(sku: string, quantity: number, available: number): AppError {
  return new AppError('out_of_stock', `SKU '${sku}' has ${available} unit(s) left, ${quantity} ordered`, { available });
}

export function lockBusy(waitedMs: number): AppError {
  return new AppError('lock_busy', `every segment stayed locked for ${waitedMs} ms`, {}, 1);
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i);
const sum = (values: Iterable<number>) => [...values].reduce((a, b) => a + b, 0);
