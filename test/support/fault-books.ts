import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Redis } from 'ioredis';
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import { auditSku, booksViolations } from './invariants.js';
import { checkHistory } from './linearizability.js';
import { type OrderLoad, statusCounts } from './order-load.js';

export interface FaultCaseReport {
  stock: number;
  sold: number;
  available: number;
  /** Units sold beyond the stock: Σ ledger + available − stock when positive. */
  oversold: number;
  /** Units neither sold nor available any more: stock − Σ ledger − available when positive. */
  vanished: number;
  negativeSegments: number;
  intents: number;
  acknowledged: number;
  /** Acknowledged orders (201/200) missing from Postgres, or whose order or ledger rows differ from the answer. */
  lost: number;
  /** Orders in Postgres with a key the clients never sent. */
  phantom: number;
  /** Orders that were applied although their client gave up on them (their answer was lost in the fault). */
  appliedUnacknowledged: number;
  falseSoldOut: number;
  statuses: Record<string, number>;
  violations: string[];
}

interface StoredOrder {
  id: string;
  key: string | null;
  quantity: number;
  createdAt: number;
  deductions: { segment: number; quantity: number }[];
}

/**
 * Checks a fault case's invariants from Postgres (bypassing the service) against what the clients were told: the
 * SKU's books as every test and the load test check them (booksViolations: nothing oversold or vanished, no segment
 * negative, every order with its ledger), then every acknowledged order present as answered, Σ orders = Σ ledger, no
 * order refused as out of stock while enough stock remained, and nothing left once demand exceeded supply.
 * Returns every broken invariant in `violations`, with the numbers, rather than stopping at the first.
 */
export async function checkFaultCase(
  db: Db,
  input: { sku: string; load: OrderLoad; apiView?: { available: number; sold: number; stock: number } },
): Promise<FaultCaseReport> {
  const { sku, load } = input;
  const audit = await auditSku(db, sku);
  const { rows } = await sql<{
    id: string;
    key: string | null;
    quantity: number;
    created_at: Date;
    deductions: StoredOrder['deductions'];
  }>`
    -- The key as the client sent it: stored after its caller's scope (src/http/idempotency-key.ts).
    select o.id, substr(o.idempotency_key, strpos(o.idempotency_key, ' ') + 1) as key, o.quantity, o.created_at,
           coalesce(json_agg(json_build_object('segment', d.segment, 'quantity', d.quantity) order by d.segment)
                    filter (where d.order_id is not null), '[]') as deductions
      from orders o
      join skus s on s.id = o.sku_id and s.sku = ${sku}
      left join stock_deductions d on d.order_id = o.id
     group by o.id`.execute(db);
  const orders: StoredOrder[] = rows.map((r) => ({
    id: r.id,
    key: r.key,
    quantity: Number(r.quantity),
    createdAt: r.created_at.getTime(),
    deductions: r.deductions.map((d) => ({ segment: Number(d.segment), quantity: Number(d.quantity) })),
  }));
  const byKey = new Map(orders.map((o) => [o.key, o]));

  const oversold = Math.max(0, audit.sold + audit.available - audit.totalStock);
  const vanished = Math.max(0, audit.totalStock - audit.sold - audit.available);
  // The SKU's own books (stock conserved, no segment negative, every order with its ledger): the one books checker.
  const violations = booksViolations(audit);
  const orderedUnits = orders.reduce((total, o) => total + o.quantity, 0);
  if (orderedUnits !== audit.sold) violations.push(`Σ order quantities ${orderedUnits} ≠ Σ ledger ${audit.sold}`);

  let lost = 0;
  const acknowledged = load.intents.filter((i) => i.outcome === 'acknowledged');
  for (const intent of acknowledged) {
    const stored = byKey.get(intent.key);
    const answered = intent.order;
    const matches =
      stored !== undefined &&
      answered !== undefined &&
      stored.id === answered.orderId &&
      stored.quantity === intent.quantity &&
      JSON.stringify(stored.deductions) ===
        JSON.stringify([...answered.deductions].sort((a, b) => a.segment - b.segment));
    if (!matches) lost++;
  }
  if (lost > 0) violations.push(`${lost} acknowledged order(s) lost or different in Postgres`);

  const sentKeys = new Set(load.intents.map((i) => i.key));
  const phantom = orders.filter((o) => o.key === null || !sentKeys.has(o.key)).length;
  if (phantom > 0) violations.push(`${phantom} order(s) in Postgres that no client placed`);
  const appliedUnacknowledged = load.intents.filter((i) => i.outcome !== 'acknowledged' && byKey.has(i.key)).length;
  const refusedButApplied = load.intents.filter((i) => i.outcome === 'out-of-stock' && byKey.has(i.key)).length;
  if (refusedButApplied > 0) violations.push(`${refusedButApplied} order(s) answered out of stock but applied`);

  const falseSoldOut = countFalseSoldOut(load, orders, audit.totalStock);
  if (falseSoldOut > 0) violations.push(`${falseSoldOut} order(s) refused as out of stock while enough stock remained`);

  if (load.hitBound()) violations.push('the load hit its bound before the SKU sold out');
  else if (audit.available !== 0) violations.push(`${audit.available} unit(s) left although demand exceeded supply`);

  const unexpected = load.attempts.filter(
    (a) => ![0, 200, 201, 503].includes(a.status) && !(a.status === 409 && a.code === 'out_of_stock'),
  );
  if (unexpected.length > 0) {
    violations.push(
      `${unexpected.length} unexpected answer(s): ${JSON.stringify(statusCounts(unexpected))} codes ${[...new Set(unexpected.map((a) => a.code))].join(',')}`,
    );
  }

  if (input.apiView) {
    const { available, sold, stock } = input.apiView;
    if (available !== audit.available || sold !== audit.sold || stock !== audit.totalStock) {
      violations.push(
        `GET /skus says available ${available}, sold ${sold}, stock ${stock}; Postgres says ${audit.available}, ${audit.sold}, ${audit.totalStock}`,
      );
    }
  }

  return {
    stock: audit.totalStock,
    sold: audit.sold,
    available: audit.available,
    oversold,
    vanished,
    negativeSegments: audit.negativeSegments,
    intents: load.intents.length,
    acknowledged: acknowledged.length,
    lost,
    phantom,
    appliedUnacknowledged,
    falseSoldOut,
    statuses: statusCounts(load.attempts),
    violations,
  };
}

/**
 * An out-of-stock answer for q units received at time T is false if at T at least q units were provably left:
 * orders committed by T all started (created_at) before T, so stock − Σ{created_at ≤ T} is a lower bound of what was
 * left. Same clock: every process runs on this machine.
 */
function countFalseSoldOut(load: OrderLoad, orders: StoredOrder[], stock: number): number {
  const sorted = [...orders].sort((a, b) => a.createdAt - b.createdAt);
  const times = sorted.map((o) => o.createdAt);
  const soldBy: number[] = [];
  let running = 0;
  for (const o of sorted) {
    running += o.quantity;
    soldBy.push(running);
  }
  let count = 0;
  for (const a of load.attempts) {
    if (a.status !== 409 || a.code !== 'out_of_stock') continue;
    const index = upperBound(times, a.receivedAt) - 1;
    const leftAtLeast = stock - (index >= 0 ? soldBy[index]! : 0);
    if (leftAtLeast >= a.quantity) count++;
  }
  return count;
}

function upperBound(sorted: number[], value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid]! <= value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The Redis keys of every segment lock (see redisKeys.lock and redisKeys.segmentLock). */
/**
 * Checks every answer the load's clients were given for linearizability (per SKU, test/support/linearizability.ts):
 * a history found not linearizable is a violation in `report`; one the search cannot decide within 20 s is kept in
 * the temporary directory for checking again offline and reported, not failed (no fault case's history is today).
 */
export async function checkAnswers(label: string, sku: string, load: OrderLoad, report: FaultCaseReport) {
  const history = checkHistory(load.history, { timeBudgetMs: 20_000 });
  if (history.verdict !== 'ok') {
    // Kept for checking again offline (`checkOperations` over its operations and initial state).
    const kept = path.join(os.tmpdir(), `history-${sku}.json`);
    await writeFile(kept, JSON.stringify({ initial: [...load.history.initial], operations: load.history.operations }));
    const finding = `history ${history.verdict} (kept in ${kept}):\n${history.report}`;
    if (history.verdict === 'violation') report.violations.push(finding);
    else console.log(`[fault] ${label}: ${finding}`);
  }
  return {
    operations: load.history.operations.length,
    verdict: history.verdict,
    checkMs: Math.round(history.elapsedMs),
  };
}

export const SEGMENT_LOCK_KEYS = 'lock:{stock/*';

/** Lock keys left in Redis without an expiry would block their segment forever. */
export async function locksWithoutExpiry(redis: Redis): Promise<string[]> {
  const keys = await scanKeys(redis, SEGMENT_LOCK_KEYS);
  const ttls = await Promise.all(keys.map((k) => redis.pttl(k)));
  return keys.filter((_, i) => ttls[i] === -1);
}

export async function scanKeys(redis: Redis, pattern: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys;
}

/** Segment lock keys and their owners at one moment. */
export async function lockOwners(redis: Redis): Promise<Map<string, string>> {
  const keys = await scanKeys(redis, SEGMENT_LOCK_KEYS);
  const owners = await Promise.all(keys.map((key) => redis.hget(key, 'owner')));
  const result = new Map<string, string>();
  for (const [i, key] of keys.entries()) {
    if (owners[i]) result.set(key, owners[i]);
  }
  return result;
}
