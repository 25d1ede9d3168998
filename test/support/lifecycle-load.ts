import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import { auditSku, booksViolations } from './invariants.js';
import { statusCounts } from './order-load.js';

/** One request of the load, as the client saw it (status 0: no answer). */
export interface LifecycleAttempt {
  action: 'reserve' | 'cart' | 'confirm' | 'cancel';
  sentAt: number;
  receivedAt: number;
  status: number;
  code?: string;
}

/** An order a client placed (a reservation or a cart) and what it asked of it afterwards. */
export interface LifecycleOrder {
  key: string;
  lines: { sku: string; quantity: number }[];
  /** Set once the placement was answered 201 or 200. */
  orderId?: string;
  /** The end the client asked for, and whether an answer 200 confirmed it. */
  end?: { status: 'confirmed' | 'cancelled'; answered: boolean };
}

export interface LifecycleLoadOptions {
  /** Two SKUs with stock enough for the whole run: reservations take one, carts both. */
  skus: [string, string];
  targets: () => string[];
  workers: number;
  maxDurationMs: number;
  /** How long one request is retried on 503 or a lost connection (same Idempotency-Key) before giving up. */
  retryBudgetMs: number;
}

const REQUEST_TIMEOUT_MS = 20_000;
/** Reservations outlive the run: none expires under the test, so each ends as the client asked. */
const HOLD_SECONDS = 600;

/**
 * The order life cycle under load, beside OrderLoad's direct orders: reservations then confirmed, cancelled or left
 * held, and carts over both SKUs placed at once. Every placement carries an Idempotency-Key and every request is
 * retried on 503 or a lost connection (confirm and cancel are no-ops when repeated), as clients do during a failover.
 */
export class LifecycleLoad {
  readonly attempts: LifecycleAttempt[] = [];
  readonly orders: LifecycleOrder[] = [];
  private stopped = false;
  private done: Promise<void> | undefined;
  private next = 0;

  constructor(private readonly options: LifecycleLoadOptions) {}

  start(): this {
    const deadline = Date.now() + this.options.maxDurationMs;
    this.done = Promise.all(Array.from({ length: this.options.workers }, () => this.worker(deadline))).then(() => {});
    return this;
  }

  /** Stops starting new orders and waits for those under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }

  private async worker(deadline: number): Promise<void> {
    const [first, second] = this.options.skus;
    while (!this.stopped && Date.now() < deadline && this.options.targets().length > 0) {
      const roll = Math.random();
      const order: LifecycleOrder = {
        key: randomUUID(),
        lines:
          roll < 0.3
            ? [
                { sku: first, quantity: 1 },
                { sku: second, quantity: 1 + Math.floor(Math.random() * 2) },
              ]
            : [{ sku: Math.random() < 0.5 ? first : second, quantity: 1 + Math.floor(Math.random() * 3) }],
      };
      this.orders.push(order);
      const body = order.lines.length > 1 ? { items: order.lines } : { ...order.lines[0]!, holdSeconds: HOLD_SECONDS };
      const placed = await this.request(order.lines.length > 1 ? 'cart' : 'reserve', '/orders', body, order.key);
      if (placed.status !== 201 && placed.status !== 200) continue;
      order.orderId = placed.orderId;
      if (order.lines.length > 1 || roll > 0.85) continue;
      const status = roll < 0.6 ? 'confirmed' : 'cancelled';
      order.end = { status, answered: false };
      const ended = await this.request(
        status === 'confirmed' ? 'confirm' : 'cancel',
        `/orders/${order.orderId}/${status === 'confirmed' ? 'confirm' : 'cancel'}`,
      );
      order.end.answered = ended.status === 200;
    }
  }

  /** One request, retried on 503 or no answer until it gets another answer or the budget runs out. */
  private async request(
    action: LifecycleAttempt['action'],
    path: string,
    body?: unknown,
    key?: string,
  ): Promise<{ status: number; orderId?: string }> {
    const giveUpAt = Date.now() + this.options.retryBudgetMs;
    for (;;) {
      const targets = this.options.targets();
      const target = targets[this.next++ % Math.max(1, targets.length)] ?? 'http://127.0.0.1:9';
      const attempt: LifecycleAttempt = { action, sentAt: Date.now(), receivedAt: 0, status: 0 };
      let orderId: string | undefined;
      try {
        const response = await fetch(`${target}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(key && { 'idempotency-key': key }) },
          body: JSON.stringify(body ?? {}),
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
        attempt.status = response.status;
        if (typeof answer.code === 'string') attempt.code = answer.code;
        if (typeof answer.orderId === 'string') orderId = answer.orderId;
      } catch {
        attempt.status = 0;
      }
      attempt.receivedAt = Date.now();
      this.attempts.push(attempt);
      if (attempt.status !== 503 && attempt.status !== 0) return { status: attempt.status, orderId };
      if (Date.now() >= giveUpAt || this.stopped) return { status: attempt.status };
      await sleep(50 + Math.random() * 100);
    }
  }
}

export interface LifecycleReport {
  orders: number;
  acknowledged: number;
  confirmed: number;
  cancelled: number;
  /** Acknowledged orders missing from Postgres, or without the ledger rows of their lines. */
  lost: number;
  statuses: Record<string, number>;
  violations: string[];
}

/**
 * Checks the life-cycle load against Postgres: both SKUs' books exact (booksViolations), every acknowledged order
 * present with a ledger row total per line as placed, every confirm or cancel answered 200 in force, and no answer
 * but 200, 201 and 503 (or none).
 */
export async function checkLifecycle(db: Db, load: LifecycleLoad): Promise<LifecycleReport> {
  const violations: string[] = [];
  for (const sku of new Set(load.orders.flatMap((o) => o.lines.map((l) => l.sku)))) {
    violations.push(...booksViolations(await auditSku(db, sku)).map((v) => `${sku}: ${v}`));
  }
  const { rows } = await sql<{ id: string; key: string | null; status: string; lines: Record<string, number> }>`
    -- The key as the client sent it: stored after its caller's scope (src/http/idempotency-key.ts).
    select o.id, substr(o.idempotency_key, strpos(o.idempotency_key, ' ') + 1) as key, o.status,
           (select json_object_agg(s.sku, t.quantity) from (
              select d.sku_id, sum(d.quantity)::int as quantity from stock_deductions d
               where d.order_id = o.id group by d.sku_id) t join skus s on s.id = t.sku_id) as lines
      from orders o
     where substr(o.idempotency_key, strpos(o.idempotency_key, ' ') + 1) = any(${load.orders.map((o) => o.key)}::text[])`.execute(
    db,
  );
  const stored = new Map(rows.map((row) => [row.key, row]));
  let lost = 0;
  let confirmed = 0;
  let cancelled = 0;
  const acknowledged = load.orders.filter((o) => o.orderId !== undefined);
  for (const order of acknowledged) {
    const row = stored.get(order.key);
    const asPlaced = Object.fromEntries(order.lines.map((l) => [l.sku, l.quantity]));
    if (
      !row ||
      row.id !== order.orderId ||
      JSON.stringify(sortKeys(row.lines ?? {})) !== JSON.stringify(sortKeys(asPlaced))
    ) {
      lost++;
      continue;
    }
    if (order.end?.answered && row.status !== order.end.status) {
      violations.push(`order ${row.id} answered ${order.end.status} but is ${row.status}`);
    }
    if (row.status === 'confirmed') confirmed++;
    if (row.status === 'cancelled') cancelled++;
  }
  if (lost > 0) violations.push(`${lost} acknowledged order(s) lost or different in Postgres`);
  const unexpected = load.attempts.filter((a) => ![0, 200, 201, 503].includes(a.status));
  if (unexpected.length > 0) {
    violations.push(`${unexpected.length} unexpected answer(s): ${JSON.stringify(statusCounts(unexpected))}`);
  }
  return {
    orders: load.orders.length,
    acknowledged: acknowledged.length,
    confirmed,
    cancelled,
    lost,
    statuses: statusCounts(load.attempts),
    violations,
  };
}

function sortKeys(record: Record<string, number>): [string, number][] {
  return Object.entries(record).sort(([a], [b]) => a.localeCompare(b));
}
