import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Answer, History, orderAnswer, readAnswer } from './history.js';

/** One HTTP request of the load, as the client saw it. Times are epoch milliseconds (comparable with Postgres). */
export interface Attempt {
  intent: number;
  target: string;
  quantity: number;
  sentAt: number;
  receivedAt: number;
  /** HTTP status, or 0 when no answer came (connection refused or reset, timeout). */
  status: number;
  code?: string;
  /** What the answer said (an order's id, a refusal's availability), as the history records it. */
  answer?: Answer | null;
}

/** One order a client wanted to place, retried under one Idempotency-Key until it got a definite answer. */
export interface Intent {
  key: string;
  quantity: number;
  outcome: 'pending' | 'acknowledged' | 'out-of-stock' | 'gave-up' | 'unexpected';
  /** The order as the service acknowledged it (201, or 200 for a replay of an order already placed). */
  order?: { orderId: string; deductions: { segment: number; quantity: number }[] };
}

export interface OrderLoadOptions {
  sku: string;
  /** Where to send the next request; asked on every request, so members can come and go. */
  targets: () => string[];
  workers: number;
  maxQuantity: number;
  /** Hard bounds on the whole run. */
  maxIntents: number;
  maxDurationMs: number;
  /** How long one intent is retried on 503 or a lost connection before the client gives up on it. */
  retryBudgetMs: number;
  /** Clients reading the SKU (`GET /skus/:sku`) while the orders run, one read after another each; 0 by default. */
  readers?: number;
  /** The SKU's stock when the load starts, for the history's initial state (unknown if not given). */
  stock?: number;
}

const REQUEST_TIMEOUT_MS = 20_000;

/**
 * Concurrent clients ordering one SKU until it is sold out, as shoppers would: every order carries an
 * Idempotency-Key; a 503 or a lost connection is retried with the same key on the next instance; an order refused as
 * out of stock is tried again for one unit, and a worker stops once even one unit is refused. So demand always
 * exceeds supply, and a run ends with the stock sold out (or at a bound, which the caller treats as a failure).
 */
export class OrderLoad {
  readonly attempts: Attempt[] = [];
  readonly intents: Intent[] = [];
  /** Every intent as one operation (invoked at its first attempt, answered by its last) and every read. */
  readonly history = new History();
  private stopped = false;
  private startedAt = 0;
  private nextTarget = 0;
  private done: Promise<void> | undefined;

  constructor(private readonly options: OrderLoadOptions) {}

  start(): this {
    this.startedAt = Date.now();
    if (this.options.stock !== undefined) this.history.created(this.options.sku, this.options.stock);
    const workers = Promise.all(Array.from({ length: this.options.workers }, () => this.worker()));
    let ordering = true;
    const readers = Promise.all(Array.from({ length: this.options.readers ?? 0 }, () => this.reader(() => ordering)));
    this.done = workers
      .then(() => {
        ordering = false;
        return readers;
      })
      .then(() => {});
    return this;
  }

  /** Resolves when every worker has seen the SKU sold out, or a bound was hit. */
  finished(): Promise<void> {
    if (!this.done) throw new Error('load not started');
    return this.done;
  }

  stop(): void {
    this.stopped = true;
  }

  /** Units in acknowledged orders so far. */
  acknowledgedUnits(): number {
    return this.intents.reduce((total, i) => total + (i.outcome === 'acknowledged' ? i.quantity : 0), 0);
  }

  /** Waits until at least `units` are acknowledged; false if the run ended or `timeoutMs` passed first. */
  async untilAcknowledged(units: number, timeoutMs = 60_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    let ended = false;
    void this.finished().then(() => (ended = true));
    while (this.acknowledgedUnits() < units) {
      if (ended || Date.now() > deadline) return false;
      await sleep(10);
    }
    return true;
  }

  /** True when the run hit a bound instead of ending with every worker seeing the SKU sold out. */
  hitBound(): boolean {
    return this.intents.length >= this.options.maxIntents || Date.now() - this.startedAt >= this.options.maxDurationMs;
  }

  private withinBounds(): boolean {
    return !this.stopped && !this.hitBound();
  }

  private async worker(): Promise<void> {
    let maxQuantity = this.options.maxQuantity;
    while (this.withinBounds()) {
      // No instance left to take orders (all crashed): nothing more to learn from this run.
      if (this.options.targets().length === 0) return;
      const quantity = 1 + Math.floor(Math.random() * maxQuantity);
      const intent: Intent = { key: randomUUID(), quantity, outcome: 'pending' };
      this.intents.push(intent);
      await this.place(this.intents.length - 1, intent);
      if (intent.outcome === 'out-of-stock') {
        if (quantity === 1) return;
        maxQuantity = 1;
      }
    }
  }

  private async place(index: number, intent: Intent): Promise<void> {
    const giveUpAt = Date.now() + this.options.retryBudgetMs;
    // One operation however often it is retried: the key makes every attempt the same order.
    const answered = this.history.invoke(this.options.sku, { kind: 'place', quantity: intent.quantity, hold: false });
    for (;;) {
      const attempt = await this.send(index, intent);
      if (attempt.status === 201 || attempt.status === 200) {
        intent.outcome = 'acknowledged';
        answered(attempt.answer!, attempt.target);
        return;
      }
      if (attempt.status === 409 && attempt.code === 'out_of_stock') {
        intent.outcome = 'out-of-stock';
        answered(attempt.answer!, attempt.target);
        return;
      }
      if (attempt.status !== 503 && attempt.status !== 0) {
        // Left without an answer in the history: the books report it.
        intent.outcome = 'unexpected';
        return;
      }
      if (Date.now() >= giveUpAt || this.stopped || this.options.targets().length === 0) {
        intent.outcome = 'gave-up';
        return;
      }
      await sleep(50 + Math.random() * 100);
    }
  }

  private async send(index: number, intent: Intent): Promise<Attempt> {
    const targets = this.options.targets();
    const target = targets[this.nextTarget++ % Math.max(1, targets.length)] ?? 'http://127.0.0.1:9';
    const attempt: Attempt = {
      intent: index,
      target,
      quantity: intent.quantity,
      sentAt: Date.now(),
      receivedAt: 0,
      status: 0,
    };
    try {
      const response = await fetch(`${target}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': intent.key },
        body: JSON.stringify({ sku: this.options.sku, quantity: intent.quantity }),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      const body = (await response.json().catch(() => ({}))) as Record<string, unknown>;
      attempt.status = response.status;
      attempt.answer = orderAnswer(response.status, body);
      if (typeof body.code === 'string') attempt.code = body.code;
      if (response.status === 201 || response.status === 200) {
        intent.order = {
          orderId: String(body.orderId),
          deductions: body.deductions as { segment: number; quantity: number }[],
        };
      }
    } catch {
      attempt.status = 0;
    }
    attempt.receivedAt = Date.now();
    this.attempts.push(attempt);
    return attempt;
  }

  /**
   * Reads the SKU from the members in rotation, one read after another, while `ordering()`: every fourth read is the
   * SKU's entry in the listing (a page of one, by its name as prefix), the others `GET /skus/:sku`.
   */
  private async reader(ordering: () => boolean): Promise<void> {
    const sku = this.options.sku;
    for (let n = 0; ordering(); n++) {
      const targets = this.options.targets();
      if (targets.length === 0) return;
      const target = targets[this.nextTarget++ % targets.length]!;
      const listing = n % 4 === 3;
      const answered = this.history.invoke(sku, listing ? { kind: 'read', via: 'listing' } : { kind: 'read' });
      const path = listing ? `/skus?prefix=${encodeURIComponent(sku)}&limit=1` : `/skus/${encodeURIComponent(sku)}`;
      try {
        const response = await fetch(target + path, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
        let body = (await response.json().catch(() => undefined)) as Record<string, unknown> | undefined;
        if (listing) body = (body?.skus as Record<string, unknown>[] | undefined)?.find((entry) => entry.sku === sku);
        answered(readAnswer(response.status, body), target);
      } catch {
        // No answer: the read stays indeterminate, which constrains nothing.
      }
      await sleep(10 + Math.random() * 20);
    }
  }
}

/** Counts of the answers a load received, by status (0: no answer). */
export function statusCounts(attempts: readonly { status: number }[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of attempts) counts[a.status] = (counts[a.status] ?? 0) + 1;
  return counts;
}
