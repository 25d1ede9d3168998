import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import type { LockLease } from '../lock/distributed-lock.js';
import { findOrder, isIdempotencyConflict, type OrderItem, type OrderRecord } from '../orders/order.repository.js';
import {
  type BatchOutcome,
  commitBatch,
  commitOrder,
  type OrderFields,
  type PlacedRow,
} from './deduction.repository.js';
import { readSegment, readSegments, type SegmentState } from './inventory.repository.js';
import { OrderQueue, type Taken, type Verdict } from './order-queue.js';
import { customerRequired, lockBusy, outOfStock, purchaseLimit } from './refusals.js';
import { compareRefs, type SegmentLocks, type SegmentRef } from './segment-locks.js';
import { chooseSegmentsToCover, rotate, splitAcross } from './segment-math.js';
import { SegmentMemory } from './segment-memory.js';
import type { SkuDirectory, SkuEntry } from './sku-directory.js';

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
/** The caller's own order of one SKU (`line`), with its place in line. */
type OwnOrder = {
  line: OrderLine;
  request: OrderRequest;
  fingerprint: string | null;
  ticket: number;
  trace: OrderTrace;
};
/** An order in a holder's batch: the holder's own, or one it took from the queue (`taken`). */
type BatchMember = {
  quantity: number;
  idempotencyKey: string | undefined;
  fingerprint: string | null;
  customerId: string | undefined;
  holdSeconds: number | undefined;
  ticket: number;
  taken?: Taken;
};
/** A segment's share of an order, decided under its lock. */
type Take = { entry: SkuEntry; segment: number; lease: LockLease; state: SegmentState; take: number };

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
      const entries = await Promise.all(request.lines.map((line) => this.directory.get(line.sku)));
      const limited = entries.find((entry) => entry.maxPerCustomer !== null);
      if (limited && request.customerId === undefined) throw customerRequired(limited.sku);
      const ticket = this.locks.ticket();
      const outcome =
        entries.length === 1
          ? await this.attempt(entries[0]!, { line: request.lines[0]!, request, fingerprint, ticket, trace }, deadline)
          : await this.attemptCart(entries, { request, fingerprint, ticket, trace }, deadline);
      if ('order' in outcome) return { order: outcome.order, replayed: false };
      if (outcome.restart === 'lost-race') {
        const winner = await findOrder(this.db, { idempotencyKey: request.idempotencyKey! });
        if (winner) return replay(winner, fingerprint);
      }
      // A refused fence may also mean a per-customer limit was set meanwhile: look at the SKU afresh.
      if (outcome.restart === 'layout-changed' || outcome.restart === 'fenced-out') {
        for (const entry of entries) this.directory.invalidate(entry);
      }
      if (Date.now() >= deadline) throw lockBusy(this.options.lockWaitMs);
    }
  }

  /**
   * One attempt on one layout of the SKU, in rounds: try each segment that may suffice; else cover from several;
   * else, if some segment was busy, wait for a release and go again. Out of stock once no segment is left unread.
   */
  private async attempt(entry: SkuEntry, mine: OwnOrder, deadline: number): Promise<Attempt> {
    const { line, ticket } = mine;
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
      const candidates = this.candidates(entry, line.quantity, seen, wokenFor);
      let busy = candidates;
      if (!lineUpFirst) {
        const tried = await this.trySegments(entry, mine, candidates, seen);
        if ('order' in tried || 'restart' in tried) return tried;
        busy = tried.busy;
      }
      lineUpFirst = false;

      const cover = chooseSegmentsToCover(
        [...seen].map(([segment, available]) => ({ segment, available })),
        line.quantity,
      );
      if (cover) {
        const covered = await this.coverFromSeveral(entry, mine, cover, seen, { deadline, ticket });
        if (covered) return covered;
        continue;
      }
      const unread = busy.filter((s) => !seen.has(s));
      if (unread.length === 0) return this.soldOut(entry, line, seen);
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
      if (verdict.kind === 'over-limit') throw purchaseLimit(entry.sku, verdict.remaining);
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
    const { line, request, fingerprint, ticket } = mine;
    if (this.options.combineMaxBatch <= 1)
      return { segment: await this.locks.waitForRelease(refs, { ...wait, ticket }) };
    // Taken into a batch, the order stops waiting for a release at once: a release that woke it now would be spent on
    // a caller that no longer tries the lock, and the waiters behind it would sleep through the lock being free.
    const taken = new AbortController();
    const waiting = this.queue.join(entry.sku, {
      quantity: line.quantity,
      idempotencyKey: request.idempotencyKey,
      fingerprint,
      customerId: request.customerId,
      holdSeconds: request.holdSeconds,
      exclusiveBy: exclusiveBy(entry, request),
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
      if (sum(seen.values()) >= mine.line.quantity) break;
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
    const { line, request, fingerprint } = mine;
    const max = this.options.combineMaxBatch - 1;
    const inBatch = new Set(exclusiveBy(entry, request));
    const queued = this.queue.take(entry.sku, entry.layoutVersion, state.available, max, inBatch);
    const members: BatchMember[] = [
      {
        quantity: line.quantity,
        idempotencyKey: request.idempotencyKey,
        fingerprint,
        customerId: request.customerId,
        holdSeconds: request.holdSeconds,
        ticket: mine.ticket,
      },
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
    let result: BatchOutcome;
    try {
      result = await commitBatch(this.db, {
        skuId: entry.id,
        layoutVersion: entry.layoutVersion,
        segment,
        availableSeen: state.available,
        fenceSeen: state.fence,
        fence: lease.fence,
        limited: entry.maxPerCustomer !== null,
        orders: serving.map((m) => ({ ...fieldsOf(m.orderId, m, m.fingerprint), quantity: m.quantity })),
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
      const remaining = result.overLimit.get(served.orderId);
      if (remaining !== undefined) return { kind: 'over-limit', remaining };
      const row = result.placed.get(served.orderId);
      if (!row) return { kind: 'lost-race' };
      const item = { sku: entry.sku, quantity: served.quantity, deductions: [{ segment, quantity: served.quantity }] };
      return { kind: 'placed', order: recordOf(fieldsOf(served.orderId, served, served.fingerprint), row, [item]) };
    };
    settleQueued(outcomeOf);
    const own = outcomeOf(members.find((m) => !m.taken)!);
    if (own.kind === 'placed') return { order: own.order };
    if (own.kind === 'lost-race') return { restart: 'lost-race' };
    if (own.kind === 'over-limit') throw purchaseLimit(entry.sku, own.remaining);
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
    mine: OwnOrder,
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
        const split = splitAcross(states, mine.line.quantity);
        if (split) {
          const takes = split.map(({ segment, quantity }) => {
            const i = segments.indexOf(segment);
            return { entry, segment, lease: leases[i]!, state: states[i]!, take: quantity };
          });
          return await this.commit(mine, takes);
        }
        if (round === rounds.length - 1) return this.soldOut(entry, mine.line, seen);
      } finally {
        await this.locks.releaseAll(leases);
      }
    }
    return undefined;
  }

  /**
   * A cart: every line covered under the locks of the segments it takes from, all of the cart's locks taken in one
   * global order (SKU, then segment) so that carts over the same SKUs in any order cannot deadlock, then one
   * transaction. First from the segments an unlocked read suggests; if stock moved meanwhile, from every segment of
   * the cart's SKUs not known to be empty, whose stock read under their locks is then the definitive answer. All or
   * nothing: a line that cannot be covered refuses the cart, naming the first such SKU.
   */
  private async attemptCart(entries: SkuEntry[], cart: Omit<OwnOrder, 'line'>, deadline: number): Promise<Attempt> {
    const lines = cart.request.lines;
    // A SKU this instance knows to be sold out refuses the cart at once, as it would a one-SKU order.
    const soldOut = entries.findIndex((entry) => this.nonEmptySegments(entry).length === 0);
    if (soldOut >= 0) return this.soldOut(entries[soldOut]!, lines[soldOut]!, new Map());
    const hints = await Promise.all(
      entries.map((entry) =>
        readSegments(this.db, {
          skuId: entry.id,
          layoutVersion: entry.layoutVersion,
          segments: this.nonEmptySegments(entry),
        }),
      ),
    );
    const suggested = entries.map(
      (entry, i) => chooseSegmentsToCover(hints[i]!, lines[i]!.quantity) ?? this.nonEmptySegments(entry),
    );
    const everyOpen = entries.map((entry) => this.nonEmptySegments(entry));
    const sameAsEvery = suggested.every((segments, i) => segments.length === everyOpen[i]!.length);
    const rounds = sameAsEvery ? [everyOpen] : [suggested, everyOpen];
    for (const [round, segmentsBySku] of rounds.entries()) {
      const wanted = segmentsBySku.flatMap((segments, i) => segments.map((segment) => refOf(entries[i]!, segment)));
      const refs = [...wanted].sort(compareRefs);
      const leases = await this.locks.acquireInOrder(refs, deadline, cart.ticket);
      if (!leases) throw lockBusy(this.options.lockWaitMs);
      try {
        const leaseOf = new Map(refs.map((ref, i) => [`${ref.sku}\u0000${ref.segment}`, leases[i]!]));
        const takes: Take[] = [];
        let short: { entry: SkuEntry; line: OrderLine; available: number } | undefined;
        for (const [i, entry] of entries.entries()) {
          const segments = segmentsBySku[i]!;
          const states = await readSegments(this.db, {
            skuId: entry.id,
            layoutVersion: entry.layoutVersion,
            segments,
          });
          if (states.length !== segments.length) {
            this.directory.invalidate(entry);
            return { restart: 'layout-changed' };
          }
          for (const state of states) {
            this.memory.remember(leaseOf.get(`${entry.sku}\u0000${state.segment}`)!, state);
            if (state.available === 0) this.markEmpty(entry, state.segment);
          }
          const split = splitAcross(states, lines[i]!.quantity);
          if (!split) {
            short ??= { entry, line: lines[i]!, available: sum(states.map((s) => s.available)) };
            continue;
          }
          for (const { segment, quantity } of split) {
            const state = states.find((s) => s.segment === segment)!;
            const lease = leaseOf.get(`${entry.sku}\u0000${segment}`)!;
            takes.push({ entry, segment, lease, state, take: quantity });
          }
        }
        if (!short) return await this.commit({ ...cart, line: lines[0]! }, takes);
        if (round === rounds.length - 1) {
          if (short.entry.stale) return { restart: 'layout-changed' };
          throw outOfStock(short.entry.sku, short.line.quantity, short.available);
        }
      } finally {
        await this.locks.releaseAll(leases);
      }
    }
    return { restart: 'layout-changed' };
  }

  /**
   * Every segment not known to be empty was read under its lock and they fall short. Segments marked empty stay
   * empty until stock comes back, which marks the entry stale: then look again rather than refuse.
   */
  private soldOut(entry: SkuEntry, line: OrderLine, seen: Map<number, number>): Restart {
    if (entry.stale) return { restart: 'layout-changed' };
    throw outOfStock(entry.sku, line.quantity, sum(seen.values()));
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

  /**
   * The write half of the critical section for takes from several segments (a cover, a cart): fenced segment
   * updates, the order and its ledger, one transaction.
   */
  private async commit(mine: OwnOrder, takes: Take[]): Promise<Attempt> {
    const { request, fingerprint } = mine;
    const lockLost = AbortSignal.any(takes.map(({ lease }) => lease.signal));
    const forgetAll = () => {
      for (const { lease } of takes) this.memory.forget(lease);
    };
    if (this.options.criticalSectionDelayMs > 0) {
      await sleep(this.options.criticalSectionDelayMs, undefined, { signal: lockLost }).catch(() => undefined);
    }
    const skus = [...new Set(takes.map((t) => t.entry))];
    if (lockLost.aborted) {
      // The watchdog could not keep a lease: do not even try the write (the fence would refuse it anyway).
      forgetAll();
      for (const entry of skus) this.hooks.onLockLost?.(entry.sku);
      return { restart: 'lock-lost' };
    }
    const fields = fieldsOf(randomUUID(), request, fingerprint);
    let outcome: Awaited<ReturnType<typeof commitOrder>>;
    try {
      outcome = await commitOrder(this.db, {
        ...fields,
        skuId: skus.length === 1 ? skus[0]!.id : null,
        quantity: sum(takes.map((t) => t.take)),
        limitedSkuIds: skus.filter((entry) => entry.maxPerCustomer !== null).map((entry) => entry.id),
        deductions: takes.map(({ entry, segment, lease, state, take }) => ({
          skuId: entry.id,
          layoutVersion: entry.layoutVersion,
          segment,
          availableSeen: state.available,
          fenceSeen: state.fence,
          fence: lease.fence,
          quantity: take,
        })),
      });
    } catch (error) {
      forgetAll();
      if (isIdempotencyConflict(error)) return { restart: 'lost-race' };
      throw error;
    }
    if ('fencedOut' in outcome) {
      forgetAll();
      for (const entry of skus) this.hooks.onFencedOut?.(entry.sku);
      return { restart: 'fenced-out' };
    }
    if ('limit' in outcome) {
      forgetAll();
      throw purchaseLimit(skus.find((entry) => entry.id === outcome.limit.skuId)!.sku, outcome.limit.remaining);
    }
    for (const { entry, segment, lease, state, take } of takes) {
      this.memory.remember(lease, { segment, available: state.available - take, fence: lease.fence });
      if (state.available === take) this.markEmpty(entry, segment);
    }
    const items: OrderItem[] = skus
      .map((entry) => {
        const mineOf = takes.filter((t) => t.entry === entry);
        return {
          sku: entry.sku,
          quantity: sum(mineOf.map((t) => t.take)),
          deductions: mineOf.map(({ segment, take }) => ({ segment, quantity: take })),
        };
      })
      .sort((a, b) => (a.sku < b.sku ? -1 : a.sku > b.sku ? 1 : 0));
    return { order: recordOf(fields, outcome.placed, items) };
  }
}

function replay(prior: OrderRecord, fingerprint: string | null): PlacedOrder {
  if (prior.requestFingerprint !== fingerprint) {
    throw new AppError('idempotency_key_reused', 'this Idempotency-Key was used for a different order request');
  }
  return { order: prior, replayed: true };
}

/**
 * What the order asks, hashed: a single line with neither customer nor hold hashes as it always has, so keys sent
 * before carts and reservations existed still replay.
 */
function fingerprintOf(request: OrderRequest): string {
  const { lines, customerId, holdSeconds } = request;
  const asked =
    lines.length === 1 && customerId === undefined && holdSeconds === undefined
      ? [lines[0]!.sku, lines[0]!.quantity]
      : { lines, customerId: customerId ?? null, holdSeconds: holdSeconds ?? null };
  return createHash('sha256').update(JSON.stringify(asked)).digest('hex');
}

function exclusiveBy(entry: SkuEntry, request: OrderRequest): string[] {
  const values: string[] = [];
  if (request.idempotencyKey !== undefined) values.push(`key:${request.idempotencyKey}`);
  if (entry.maxPerCustomer !== null && request.customerId !== undefined) values.push(`customer:${request.customerId}`);
  return values;
}

function fieldsOf(
  orderId: string,
  asked: { idempotencyKey?: string | undefined; customerId?: string | undefined; holdSeconds?: number | undefined },
  fingerprint: string | null,
): OrderFields {
  return {
    orderId,
    idempotencyKey: asked.idempotencyKey ?? null,
    requestFingerprint: fingerprint,
    customerId: asked.customerId ?? null,
    holdSeconds: asked.holdSeconds ?? null,
  };
}

function recordOf(fields: OrderFields, row: PlacedRow, items: OrderItem[]): OrderRecord {
  return {
    id: fields.orderId,
    status: row.status,
    customerId: fields.customerId,
    items,
    idempotencyKey: fields.idempotencyKey,
    requestFingerprint: fields.requestFingerprint,
    createdAt: row.createdAt,
    expiresAt: row.expiresAt,
  };
}

function refOf(entry: SkuEntry, segment: number): SegmentRef {
  return { sku: entry.sku, layoutVersion: entry.layoutVersion, segment };
}

/** The reason a taken order's wait ends with: one shared value, not an error built (with its stack) per order. */
const TAKEN_INTO_A_BATCH = Symbol('taken into a batch');

const range = (n: number) => Array.from({ length: n }, (_, i) => i);
const sum = (values: Iterable<number>) => [...values].reduce((a, b) => a + b, 0);
