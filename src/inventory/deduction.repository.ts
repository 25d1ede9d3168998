import type { Transaction } from 'kysely';
import { type Db, type PreparedStatement, runPrepared } from '../db/database.js';
import type { Database, OrderStatus } from '../db/schema.js';
import { type Claim, claimUnits, releaseUnits } from './customer-holdings.repository.js';

/** What an order asks beyond its stock: the fields of its row. */
export interface OrderFields {
  orderId: string;
  idempotencyKey: string | null;
  requestFingerprint: string | null;
  customerId: string | null;
  /** A reservation's hold; null places the order confirmed. */
  holdSeconds: number | null;
}

/** The order row as written: when it was placed, and until when a reservation holds. */
export interface PlacedRow {
  status: OrderStatus;
  createdAt: Date;
  expiresAt: Date | null;
}

/** A refusal by a per-customer limit: the SKU, and the units the customer may still order of it. */
export interface LimitRefusal {
  skuId: number;
  remaining: number;
}

export interface SegmentDeduction {
  skuId: number;
  layoutVersion: number;
  segment: number;
  /** Stock the lock holder read, and the token of the row's last writer at that read. */
  availableSeen: number;
  fenceSeen: number;
  /** The holder's own fencing token. */
  fence: number;
  quantity: number;
}

export interface OrderCommit extends OrderFields {
  /** The order's SKU; null for a cart. */
  skuId: number | null;
  quantity: number;
  deductions: SegmentDeduction[];
  /** SKUs of the order with a per-customer limit: their units are claimed for the customer in the same transaction. */
  limitedSkuIds: number[];
}

export type CommitOutcome = { placed: PlacedRow } | { fencedOut: true } | { limit: LimitRefusal };

/**
 * Segments written fenced — each one's new stock computed here from what the holder read, written only where the row
 * still carries the token seen at the read and ours is newer — with its running total of units sold or reserved; then
 * the order and its ledger rows, inserted only if every segment write went through. A SKU that has a per-customer
 * limit the caller did not claim for (one set since the caller looked) is not written: the caller looks again.
 */
const commitStatement: PreparedStatement = {
  name: 'commit_order',
  text: `
    with written as (
      update stock_segments s
         set available = w.available, fence_token = w.fence,
             sold = s.sold + case when $13::int is null then w.quantity else 0 end,
             reserved = s.reserved + case when $13::int is null then 0 else w.quantity end
        from unnest($1::int[], $2::int[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
               as w(sku_id, layout_version, segment, available, fence, seen, quantity)
       where s.sku_id = w.sku_id and s.layout_version = w.layout_version and s.segment = w.segment
         and s.fence_token = w.seen and s.fence_token < w.fence
         and (w.sku_id = any($15::int[]) or (select k.max_per_customer from skus k where k.id = w.sku_id) is null)
      returning 1
    ), placed as (
      insert into orders (id, sku_id, quantity, idempotency_key, request_fingerprint, status, customer_id, expires_at)
      select $8::uuid, $9::int, $10::bigint, $11::text, $12::text,
             case when $13::int is null then 'confirmed' else 'reserved' end, $14::text,
             now() + $13::int * interval '1 second'
       where (select count(*) from written) = cardinality($1::int[])
      returning status, created_at, expires_at
    ), ledger as (
      insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
      select $8::uuid, x.sku_id, x.segment, x.layout_version, x.quantity, x.fence
        from placed, unnest($1::int[], $2::int[], $3::int[], $7::bigint[], $5::bigint[])
               as x(sku_id, layout_version, segment, quantity, fence)
    )
    select (select count(*) from written)::int as written, p.status, p.created_at, p.expires_at
      from (select 1) one left join placed p on true`,
};

/** Rolls a transaction back with an outcome for the caller. */
class Refused extends Error {
  constructor(readonly outcome: CommitOutcome) {
    super('refused');
  }
}

/**
 * The write half of the critical section for an order taking from one or more segments, of one SKU or (a cart) of
 * several. One statement when it can be (a single segment, no limit): one round trip, planned once per connection,
 * atomic by itself; otherwise a transaction that claims the customer's units for each limited SKU first and rolls
 * everything back if a claim is refused or a fenced write is. An Idempotency-Key conflict throws.
 */
export async function commitOrder(db: Db, commit: OrderCommit): Promise<CommitOutcome> {
  if (commit.deductions.length === 1 && commit.limitedSkuIds.length === 0) return runCommit(db, commit);
  try {
    return await db.transaction().execute(async (trx) => {
      for (const skuId of commit.limitedSkuIds) {
        const units = commit.deductions.filter((d) => d.skuId === skuId).reduce((total, d) => total + d.quantity, 0);
        const refused = await claimUnits(trx, skuId, [{ customerId: commit.customerId!, units }]);
        const remaining = refused.get(commit.customerId!);
        if (remaining !== undefined) throw new Refused({ limit: { skuId, remaining } });
      }
      const outcome = await runCommit(trx, commit);
      if (!('placed' in outcome)) throw new Refused(outcome);
      return outcome;
    });
  } catch (error) {
    if (error instanceof Refused) return error.outcome;
    throw error;
  }
}

async function runCommit(db: Db | Transaction<Database>, commit: OrderCommit): Promise<CommitOutcome> {
  const d = commit.deductions;
  const [row] = await runPrepared<{
    written: number;
    status: OrderStatus | null;
    created_at: Date | null;
    expires_at: Date | null;
  }>(db, commitStatement, [
    d.map((x) => x.skuId),
    d.map((x) => x.layoutVersion),
    d.map((x) => x.segment),
    d.map((x) => x.availableSeen - x.quantity),
    d.map((x) => x.fence),
    d.map((x) => x.fenceSeen),
    d.map((x) => x.quantity),
    commit.orderId,
    commit.skuId,
    commit.quantity,
    commit.idempotencyKey,
    commit.requestFingerprint,
    commit.holdSeconds,
    commit.customerId,
    commit.limitedSkuIds,
  ]);
  if (row!.created_at === null) return { fencedOut: true };
  return { placed: { status: row!.status!, createdAt: row!.created_at, expiresAt: row!.expires_at } };
}

/** One order of a batch served from one segment. */
export interface BatchedOrder extends OrderFields {
  quantity: number;
}

export interface BatchCommit {
  skuId: number;
  layoutVersion: number;
  segment: number;
  /** Stock the holder read, and the token of the row's last writer at that read. */
  availableSeen: number;
  fenceSeen: number;
  /** The holder's own fencing token. */
  fence: number;
  /** The SKU has a per-customer limit: every order carries a customer, each customer at most once in the batch. */
  limited: boolean;
  orders: BatchedOrder[];
}

export interface BatchOutcome {
  /** False when the fence refused the write (or a limit appeared): nothing was written. */
  written: boolean;
  /** The orders placed, by id. */
  placed: Map<string, PlacedRow>;
  /** Orders refused by the customer's limit, by id, with the units their customer may still order. */
  overLimit: Map<string, number>;
}

const batchStatement: PreparedStatement = {
  name: 'commit_batch',
  text: `
    with guard as (
      select 1 from stock_segments
       where sku_id = $1::int and layout_version = $2::int and segment = $3::int
         and fence_token = $5::bigint and fence_token < $6::bigint
         and ($13::boolean or (select max_per_customer from skus where id = $1::int) is null)
         for update
    ), placed as (
      insert into orders (id, sku_id, quantity, idempotency_key, request_fingerprint, status, customer_id, expires_at)
      select b.id, $1::int, b.quantity, b.idempotency_key, b.request_fingerprint,
             case when b.hold is null then 'confirmed' else 'reserved' end, b.customer_id,
             now() + b.hold * interval '1 second'
        from unnest($7::uuid[], $8::bigint[], $9::text[], $10::text[], $11::int[], $12::text[])
               as b(id, quantity, idempotency_key, request_fingerprint, hold, customer_id)
       where exists (select 1 from guard)
      on conflict (idempotency_key) do nothing
      returning id, quantity, status, created_at, expires_at
    ), written as (
      update stock_segments s
         set available = $4::bigint - (select coalesce(sum(quantity), 0) from placed),
             fence_token = $6::bigint,
             sold = s.sold + (select coalesce(sum(quantity), 0) from placed where status = 'confirmed'),
             reserved = s.reserved + (select coalesce(sum(quantity), 0) from placed where status = 'reserved')
       where exists (select 1 from guard)
         and s.sku_id = $1::int and s.layout_version = $2::int and s.segment = $3::int
      returning 1
    ), ledger as (
      insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
      select id, $1::int, $3::int, $2::int, quantity, $6::bigint from placed
    )
    select (select count(*) from written)::int as written, p.id, p.status, p.created_at, p.expires_at
      from (select 1) one left join placed p on true`,
};

/**
 * The write half of a combined critical section: the orders a segment's holder decided to serve, in one statement.
 * The segment is written fenced, as for a single order (the row must still carry the token seen at the read, and ours
 * must be newer), with the stock seen less what the placed orders take; each order and its ledger row are inserted
 * only if the fence let the write through. An order whose Idempotency-Key another request already used is skipped
 * (`on conflict do nothing`) and takes nothing, without failing the others. For a limited SKU, a transaction claims
 * each customer's units first; orders whose claim is refused are left out, and claims of orders skipped for their
 * key are given back.
 */
export async function commitBatch(db: Db, batch: BatchCommit): Promise<BatchOutcome> {
  if (!batch.limited) return { ...(await runBatch(db, batch)), overLimit: new Map() };
  return db
    .transaction()
    .execute(async (trx) => {
      const claims: Claim[] = batch.orders.map((o) => ({ customerId: o.customerId!, units: o.quantity }));
      const refused = await claimUnits(trx, batch.skuId, claims);
      const overLimit = new Map<string, number>();
      const orders = batch.orders.filter((o) => {
        const remaining = refused.get(o.customerId!);
        if (remaining !== undefined) overLimit.set(o.orderId, remaining);
        return remaining === undefined;
      });
      const result =
        orders.length > 0 ? await runBatch(trx, { ...batch, orders }) : { written: true, placed: new Map() };
      if (!result.written) throw new Refused({ fencedOut: true });
      for (const order of orders) {
        if (!result.placed.has(order.orderId)) await releaseUnits(trx, batch.skuId, order.customerId!, order.quantity);
      }
      return { ...result, overLimit };
    })
    .catch((error: unknown) => {
      if (error instanceof Refused) return { written: false, placed: new Map(), overLimit: new Map() };
      throw error;
    });
}

async function runBatch(
  db: Db | Transaction<Database>,
  batch: BatchCommit,
): Promise<{ written: boolean; placed: Map<string, PlacedRow> }> {
  const rows = await runPrepared<{
    written: number;
    id: string | null;
    status: OrderStatus | null;
    created_at: Date | null;
    expires_at: Date | null;
  }>(db, batchStatement, [
    batch.skuId,
    batch.layoutVersion,
    batch.segment,
    batch.availableSeen,
    batch.fenceSeen,
    batch.fence,
    batch.orders.map((o) => o.orderId),
    batch.orders.map((o) => o.quantity),
    batch.orders.map((o) => o.idempotencyKey),
    batch.orders.map((o) => o.requestFingerprint),
    batch.orders.map((o) => o.holdSeconds),
    batch.orders.map((o) => o.customerId),
    batch.limited,
  ]);
  const placed = new Map<string, PlacedRow>();
  for (const row of rows) {
    if (row.id !== null && row.created_at !== null) {
      placed.set(row.id, { status: row.status!, createdAt: row.created_at, expiresAt: row.expires_at });
    }
  }
  return { written: rows[0]!.written === 1, placed };
}
