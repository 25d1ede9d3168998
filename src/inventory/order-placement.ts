import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import type { LockLease } from '../lock/distributed-lock.js';
import { findOrder, isIdempotencyConflict, type OrderRecord } from '../orders/order.repository.js';
import { commitBatch, commitDeduction, type DeductionCommit } from './deduction.repository.js';
import { readSegment, readSegments, type SegmentState } from './inventory.repository.js';
import { OrderQueue, type Taken, type Verdict } from './order-queue.js';
import { FencedOutError, lockBusy, outOfStock } from './refusals.js';
import type { SegmentLocks, SegmentRef } from './segment-locks.js';
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
  /** Most orders one segment holder serves in one statement (COMBINE_MAX_BATCH); 1 turns combining off. */
  combineMaxBatch: number;
  /** Benchmark knob: a simulated business step inside the lock. */
  criticalSectionDelayMs: number;
}

/** What one order went through, for the metrics: filled in by the flow while the order is placed. */
export interface OrderTrace {
  /** Segment locks tried. */
  segmentVisits: number;
  /** Time spent waiting for a release (or for a holder to serve the order). */
  waitedMs: number;
}

/** Observers of the flow (metrics); every hook is optional and must not throw. */
export interface OrderFlowHooks {
  /** Wraps each placement, to time it and record its outcome; `trace` is complete once `place` has settled. */
  observeOrder?(place: () => Promise<PlacedOrder>, trace: OrderTrace): Promise<PlacedOrder>;
  onSegmentVisit?(sku: string): void;
  onLockBusy?(sku: string): void;
  onWait?(sku: string, waitedMs: number): void;
  onFencedOut?(sku: string): void;
  onLockLost?(sku: string): void;
  /** A holder wrote `orders` orders in one statement (1 when nothing had queued behind it). */
  onBatch?(sku: string, orders: number): void;
}

/** Why an attempt ended without an answer: the caller starts over with a fresh view of the SKU. */
type Restart = { restart: 'layout-changed' | 'fenced-out' | 'lock-lost' | 'lost-race' };
type Attempt = { order: OrderRecord } | Restart;
/** The caller's own order, with its place in line. */
type OwnOrder = { request: OrderRequest; fingerprint: string | null; ticket: number; trace: OrderTrace };
/** An order in a holder's batch: the holder's own, or one it took from the queue (`taken`). */
type BatchMember = {
  quantity: number;
  idempotencyKey: string | undefined;
  fingerprint: string | null;
  ticket: number;
  taken?: Taken;
};
/** A segment's share of an order, decided under its lock. */
type Take = { segment: number; lease: LockLease; state: SegmentState; take: number };

/**
 * The order flow: pick a random segment, try its lock without waiting, read and decide under the lock, write fenced.
 * Moves to the next segment when one is busy or short; covers an order from several segments, locked in ascending
 * order, when no single one suffices; refuses only when the stock it read under locks falls short. Orders that wait
 * queue per SKU, and whoever holds a segment serves the queued orders with its own in one statement (flat combining,
 * `serveBatch`).
 */
export class OrderPlacement {
  private readonly memory = new SegmentMemory();
  private readonly queue = new OrderQueue();

  constructor(
    private readonly db: Db,
    private readonly locks: SegmentLocks,
    private readonly directory: SkuDirectory,
    private readonly options: OrderPlacementOptions,
    private readonly hooks: OrderFlowHooks = {},
  ) {}

  place(request: OrderRequest): Promise<PlacedOrder> {
    const trace: OrderTrace = { segmentVisits: 0, waitedMs: 0 };
    const place = () => this.placeOnce(request, trace);
    return this.hooks.observeOrder ? this.hooks.observeOrder(place, trace) : place();
  }

  private async placeOnce(request: OrderRequest, trace: OrderTrace): Promise<PlacedOrder> {
    const fingerprint = request.idempotencyKey ? fingerprintOf(request) : null;
    if (request.idempotencyKey) {
      const prior = await findOrder(this.db, { idempotencyKey: request.idempotencyKey });
      if (prior) return replay(prior, fingerprint);
    }
    const deadline = Date.now() + this.options.lockWaitMs;
    for (;;) {
      const entry = await this.directory.get(request.sku);
      const outcome = await this.attempt(entry, { request, fingerprint, ticket: this.locks.ticket(), trace }, deadline);
      if ('order' in outcome) return { order: outcome.order, replayed: false };
      if (outcome.restart === 'lost-race') {
        const winner = await findOrder(this.db, { idempotencyKey: request.idempotencyKey! });
        if (winner) return replay(winner, fingerprint);
      }
      if (outcome.restart === 'layout-changed') this.directory.invalidate(entry);
      if (Date.now() >= deadline) throw lockBusy(this.options.lockWaitMs);
    }
  }

  /**
   * One attempt on one layout of the SKU, in rounds: try each segment that may suffice; else cover from several;
   * else, if some segment was busy, wait for a release and go again. Out of stock once no segment is left unread.
   */
  private async attempt(entry: SkuEntry, mine: OwnOrder, deadline: number): Promise<Attempt> {
    const { request, fingerprint, ticket } = mine;
    /** Latest stock read under each segment's lock in this attempt; stock only shrinks, so these are upper bounds. */
    const seen = new Map<number, number>();
    // Listening before the first try: a release between a try and the wait after it must still wake this caller.
    await this.locks.listen(
      entry.sku,
      this.nonEmptySegments(entry).map((s) => refOf(entry, s)),
    );
    let lineUpFirst = this.shouldLineUp(entry);
    /** The segment whose release woke this caller: tried first in the next round. */
    let wokenFor: number | undefined;
    for (;;) {
      if (entry.stale) return { restart: 'layout-changed' };
      const mark = this.locks.mark();
      const candidates = this.candidates(entry, request.quantity, seen, wokenFor);
      let busy = candidates;
      if (!lineUpFirst) {
        const tried = await this.trySegments(entry, mine, candidates, seen);
        if ('order' in tried || 'restart' in tried) return tried;
        busy = tried.busy;
      }
      lineUpFirst = false;

      const cover = chooseSegmentsToCover(
        [...seen].map(([segment, available]) => ({ segment, available })),
        request.quantity,
      );
      if (cover) {
        const covered = await this.coverFromSeveral(entry, request, fingerprint, cover, seen, { deadline, ticket });
        if (covered) return covered;
        continue;
      }
      const unread = busy.filter((s) => !seen.has(s));
      if (unread.length === 0) return this.soldOut(entry, request, seen);
      if (Date.now() >= deadline) throw lockBusy(this.options.lockWaitMs);

      const started = Date.now();
      const refs = busy.map((s) => refOf(entry, s));
      const waited = await this.waitOrBeServed(entry, mine, refs, { deadline, mark });
      mine.trace.waitedMs += Date.now() - started;
      this.hooks.onWait?.(entry.sku, Date.now() - started);
      wokenFor = undefined;
      if (!('verdict' in waited)) {
        wokenFor = waited.segment;
        continue;
      }
      const verdict = waited.verdict;
      if (verdict.kind === 'placed') return { order: verdict.order };
      if (verdict.kind === 'lost-race') return { restart: 'lost-race' };
      if (verdict.kind === 'failed') throw verdict.error;
      if (verdict.kind === 'short') seen.set(verdict.segment, verdict.available);
    }
  }

  /**
   * Waits for a release of one of `refs`, lined up with this process's other waiters for the SKU; meanwhile the order
   * waits in the SKU's queue too, where whoever holds one of its segments may serve it (flat combining). Resolves with
   * the segment whose release woke the caller, or with the verdict of the holder that took the order.
   */
  private async waitOrBeServed(
    entry: SkuEntry,
    mine: OwnOrder,
    refs: SegmentRef[],
    wait: { deadline: number; mark: number },
  ): Promise<{ segment: number | undefined } | { verdict: Verdict }> {
    const { request, fingerprint, ticket } = mine;
    if (this.options.combineMaxBatch <= 1)
      return { segment: await this.locks.waitForRelease(refs, { ...wait, ticket }) };
    // Taken into a batch, the order stops waiting for a release at once: a release that woke it now would be spent on
    // a caller that no longer tries the lock, and the waiters behind it would sleep through the lock being free.
    const taken = new AbortController();
    const waiting = this.queue.join(entry.sku, {
      quantity: request.quantity,
      idempotencyKey: request.idempotencyKey,
      fingerprint,
      layoutVersion: entry.layoutVersion,
      ticket,
      onTaken: () => taken.abort(TAKEN_INTO_A_BATCH),
    });
    const woken = this.locks.waitForRelease(refs, { ...wait, ticket, signal: taken.signal });
    const first = await Promise.race([
      woken.then((segment) => ({ segment })),
      waiting.verdict.then((verdict) => ({ verdict })),
    ]);
    if ('verdict' in first) return first;
    // Woken: leave the queue, unless a holder took the order in between (its verdict is on the way). A release that
    // woke it then goes to the next waiter, as if this caller had never been in line.
    if (this.queue.leave(entry.sku, waiting)) return first;
    if (first.segment !== undefined) this.locks.passOn(refOf(entry, first.segment));
    return { verdict: await waiting.verdict };
  }

  /**
   * Whether a newcomer should queue behind this process's callers rather than try the segments. When this process
   * holds every segment and others of its callers already wait: so the single-lock case stays first come, first
   * served. And, with combining, while the SKU's holders here can still take every queued order into their batches:
   * joining them costs the order nothing but the wait, where taking one more segment costs it its own lock round trips
   * and statement. Holders are added only as the queue outgrows them (a long business step).
   */
  private shouldLineUp(entry: SkuEntry): boolean {
    const open = this.nonEmptySegments(entry);
    const heldHere = open.filter((s) => this.locks.isHeldHere(refOf(entry, s))).length;
    if (heldHere === 0) return false;
    if (heldHere === open.length && this.locks.hasWaiters(entry.sku)) return true;
    const batchRoom = heldHere * (this.options.combineMaxBatch - 1);
    return this.queue.size(entry.sku) < batchRoom;
  }

  /** Segments not known to be empty, in a random order (or starting with the one whose release woke the caller). */
  private candidates(entry: SkuEntry, quantity: number, seen: Map<number, number>, first?: number): number[] {
    const open = this.nonEmptySegments(entry).filter((s) => (seen.get(s) ?? quantity) >= quantity);
    const start = first === undefined ? -1 : open.indexOf(first);
    return rotate(open, start >= 0 ? start : Math.floor(Math.random() * open.length));
  }

  /**
   * Tries each segment's lock without waiting; the first that holds enough serves the whole order. Returns the busy
   * segments when none did, or as soon as those read cover the order together; `seen` learns what they held.
   */
  private async trySegments(
    entry: SkuEntry,
    mine: OwnOrder,
    segments: number[],
    seen: Map<number, number>,
  ): Promise<Attempt | { busy: number[] }> {
    const { request } = mine;
    const busy: number[] = [];
    for (const segment of segments) {
      mine.trace.segmentVisits++;
      this.hooks.onSegmentVisit?.(entry.sku);
      const lease = await this.locks.tryAcquire(refOf(entry, segment));
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
        const served = await this.serveBatch(entry, mine, segment, lease, state);
        if ('left' in served) seen.set(segment, served.left);
        else return served;
      } finally {
        // After a commit too: a release that fails only leaves the lease to expire, never undoes the order.
        await this.locks.releaseAll([lease]);
      }
      // The segments read so far cover the order together: cover from them, rather than lock every other segment
      // in the hope of one that suffices alone (near sell-out, none does).
      if (sum(seen.values()) >= request.quantity) break;
    }
    return { busy };
  }

  /**
   * Holding a segment's lock with its stock read: serves this caller's order and the orders of this process queued for
   * the SKU meanwhile (at most COMBINE_MAX_BATCH in all), decided in arrival order against the stock read, each taken
   * if it fits; then one statement writes the segment fenced, with every order and ledger row of the batch. The
   * caller's own order ends here when it was taken; otherwise the caller learns what the segment holds after the
   * batch (`left`) and looks elsewhere, as the queued orders that did not fit do. When the fence refuses the write
   * or the lease is lost, nothing was written, and every order of the batch tries again.
   */
  private async serveBatch(
    entry: SkuEntry,
    mine: OwnOrder,
    segment: number,
    lease: LockLease,
    state: SegmentState,
  ): Promise<Attempt | { left: number }> {
    const { request, fingerprint } = mine;
    const keys = new Set(request.idempotencyKey === undefined ? [] : [request.idempotencyKey]);
    const max = this.options.combineMaxBatch - 1;
    const queued = this.queue.take(entry.sku, entry.layoutVersion, state.available, max, keys);
    const members: BatchMember[] = [
      { ...mine, quantity: request.quantity, idempotencyKey: request.idempotencyKey, fingerprint },
      ...queued.map((t) => ({ ...t.order, taken: t })),
    ].sort((a, b) => a.ticket - b.ticket);
    let left = state.available;
    const serving: (BatchMember & { orderId: string })[] = [];
    for (const member of members) {
      if (member.quantity > left) continue;
      left -= member.quantity;
      serving.push({ ...member, orderId: randomUUID() });
    }
    const settleQueued = (verdictOf: (member: BatchMember) => Verdict) => {
      for (const member of members) member.taken?.settle(verdictOf(member));
    };
    if (serving.length === 0) {
      settleQueued(() => ({ kind: 'short', segment, available: state.available }));
      if (state.available === 0) this.markEmpty(entry, segment);
      return { left: state.available };
    }

    // The business steps of the orders served are independent of each other: they run side by side.
    if (this.options.criticalSectionDelayMs > 0) {
      await sleep(this.options.criticalSectionDelayMs, undefined, { signal: lease.signal }).catch(() => undefined);
    }
    if (lease.signal.aborted) {
      // The watchdog could not keep the lease: do not even try the write (the fence would refuse it anyway).
      this.memory.forget(lease);
      this.hooks.onLockLost?.(entry.sku);
      settleQueued(() => ({ kind: 'retry' }));
      return { restart: 'lock-lost' };
    }
    let result: Awaited<ReturnType<typeof commitBatch>>;
    try {
      result = await commitBatch(this.db, {
        skuId: entry.id,
        layoutVersion: entry.layoutVersion,
        segment,
        availableSeen: state.available,
        fenceSeen: state.fence,
        fence: lease.fence,
        orders: serving.map((m) => ({
          orderId: m.orderId,
          quantity: m.quantity,
          idempotencyKey: m.idempotencyKey ?? null,
          requestFingerprint: m.fingerprint,
        })),
      });
    } catch (error) {
      this.memory.forget(lease);
      settleQueued(() => ({ kind: 'failed', error }));
      throw error;
    }
    if (!result.written) {
      this.memory.forget(lease);
      this.hooks.onFencedOut?.(entry.sku);
      settleQueued(() => ({ kind: 'retry' }));
      return { restart: 'fenced-out' };
    }
    this.hooks.onBatch?.(entry.sku, result.placed.size);
    const placedUnits = serving.reduce((total, m) => total + (result.placed.has(m.orderId) ? m.quantity : 0), 0);
    const after = state.available - placedUnits;
    this.memory.remember(lease, { segment, available: after, fence: lease.fence });
    if (after === 0) this.markEmpty(entry, segment);

    const servedByTicket = new Map(serving.map((m) => [m.ticket, m]));
    const outcomeOf = (member: BatchMember): Verdict => {
      const served = servedByTicket.get(member.ticket);
      if (!served) return { kind: 'short', segment, available: after };
      const createdAt = result.placed.get(served.orderId);
      if (!createdAt) return { kind: 'lost-race' };
      const order: OrderRecord = {
        id: served.orderId,
        sku: entry.sku,
        quantity: served.quantity,
        idempotencyKey: served.idempotencyKey ?? null,
        requestFingerprint: served.fingerprint,
        createdAt,
        deductions: [{ segment, quantity: served.quantity }],
      };
      return { kind: 'placed', order };
    };
    settleQueued(outcomeOf);
    const own = outcomeOf(members.find((m) => !m.taken)!);
    if (own.kind === 'placed') return { order: own.order };
    if (own.kind === 'lost-race') return { restart: 'lost-race' };
    return { left: after };
  }

  /**
   * Covers the order from several segments: their locks in ascending order (so two such orders cannot deadlock), a
   * fresh read under all of them, one transaction. First from the segments seen to suffice together; if stock moved
   * meanwhile, from every segment not known to be empty, locked all at once: what they then hold is the definitive
   * answer, so covers racing each other end in an order or out of stock rather than chasing each other until the
   * wait budget runs out. Undefined when a restart is needed; `seen` is updated.
   */
  private async coverFromSeveral(
    entry: SkuEntry,
    request: OrderRequest,
    fingerprint: string | null,
    chosen: number[],
    seen: Map<number, number>,
    wait: { deadline: number; ticket: number },
  ): Promise<Attempt | undefined> {
    const everyOpen = this.nonEmptySegments(entry);
    const rounds = chosen.length < everyOpen.length ? [chosen, everyOpen] : [everyOpen];
    for (const [round, segments] of rounds.entries()) {
      const refs = segments.map((segment) => refOf(entry, segment));
      const leases = await this.locks.acquireInOrder(refs, wait.deadline, wait.ticket);
      if (!leases) throw lockBusy(this.options.lockWaitMs);
      try {
        const states = await readSegments(this.db, { skuId: entry.id, layoutVersion: entry.layoutVersion, segments });
        if (states.length !== segments.length) return { restart: 'layout-changed' };
        for (const [i, state] of states.entries()) {
          this.memory.remember(leases[i]!, state);
          seen.set(state.segment, state.available);
          if (state.available === 0) this.markEmpty(entry, state.segment);
        }
        const split = splitAcross(states, request.quantity);
        if (split) {
          const takes = split.map(({ segment, quantity }) => {
            const i = segments.indexOf(segment);
            return { segment, lease: leases[i]!, state: states[i]!, take: quantity };
          });
          return await this.commit(entry, request, fingerprint, takes);
        }
        if (round === rounds.length - 1) return this.soldOut(entry, request, seen);
      } finally {
        await this.locks.releaseAll(leases);
      }
    }
    return undefined;
  }

  /**
   * Every segment not known to be empty was read under its lock and they fall short. Segments marked empty stay
   * empty until a restock, which marks the entry stale: then look again rather than refuse.
   */
  private soldOut(entry: SkuEntry, request: OrderRequest, seen: Map<number, number>): Restart {
    if (entry.stale) return { restart: 'layout-changed' };
    throw outOfStock(entry.sku, request.quantity, sum(seen.values()));
  }

  /**
   * An empty segment is skipped from now on, so no later release of it would wake those waiting for it: wake them
   * all now, to look elsewhere or conclude the stock is gone.
   */
  private markEmpty(entry: SkuEntry, segment: number): void {
    if (this.directory.markEmpty(entry, segment)) this.locks.wakeAll(entry.sku, refOf(entry, segment));
  }

  private nonEmptySegments(entry: SkuEntry): number[] {
    return range(entry.segmentCount).filter((s) => !entry.emptySegments.has(s));
  }

  /** The write half of the critical section: fenced segment updates, the order and its ledger, one transaction. */
  private async commit(
    entry: SkuEntry,
    request: OrderRequest,
    fingerprint: string | null,
    takes: Take[],
  ): Promise<Attempt> {
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
      deductions: takes.map(({ segment, lease, state, take }) => ({
        segment,
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
    for (const { segment, lease, state, take } of takes) {
      this.memory.remember(lease, { segment, available: state.available - take, fence: lease.fence });
      if (state.available === take) this.markEmpty(entry, segment);
    }
    const deductions: SegmentTake[] = takes.map(({ segment, take }) => ({ segment, quantity: take }));
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

/** The reason a taken order's wait ends with: one shared value, not an error built (with its stack) per order. */
const TAKEN_INTO_A_BATCH = Symbol('taken into a batch');

const range = (n: number) => Array.from({ length: n }, (_, i) => i);
const sum = (values: Iterable<number>) => [...values].reduce((a, b) => a + b, 0);
