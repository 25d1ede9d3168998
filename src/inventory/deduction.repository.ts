import type { Kysely, Transaction } from 'kysely';
import { type PreparedStatement, runPrepared } from '../db/database.js';
import type { Database } from '../db/schema.js';

export interface SegmentDeduction {
  segment: number;
  /** Stock the lock holder read, and the token of the row's last writer at that read. */
  availableSeen: number;
  fenceSeen: number;
  /** The holder's own fencing token. */
  fence: number;
  quantity: number;
}

export interface DeductionCommit {
  orderId: string;
  skuId: number;
  layoutVersion: number;
  quantity: number;
  idempotencyKey: string | null;
  requestFingerprint: string | null;
  deductions: SegmentDeduction[];
}

const commitStatement: PreparedStatement = {
  name: 'commit_deduction',
  text: `
    with written as (
      update stock_segments s
         set available = w.available, fence_token = w.fence, sold = s.sold + w.quantity
        from unnest($1::int[], $2::bigint[], $3::bigint[], $4::bigint[], $11::bigint[])
               as w(segment, available, fence, seen, quantity)
       where s.sku_id = $5::int and s.layout_version = $6::int and s.segment = w.segment
         and s.fence_token = w.seen and s.fence_token < w.fence
      returning s.segment
    ), placed as (
      insert into orders (id, sku_id, quantity, idempotency_key, request_fingerprint)
      select $7::uuid, $5::int, $8::bigint, $9::text, $10::text
       where (select count(*) from written) = cardinality($1::int[])
      returning id, created_at
    ), ledger as (
      insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
      select placed.id, $5::int, x.segment, $6::int, x.quantity, x.fence
        from placed, unnest($1::int[], $11::bigint[], $3::bigint[]) as x(segment, quantity, fence)
    )
    select (select count(*) from written)::int as written, (select created_at from placed) as created_at`,
};

/**
 * The write half of the critical section in one statement: each segment's new stock — computed here from what the
 * holder read, not `available - q` in SQL — written only where the row still carries the token seen at the read and
 * ours is newer (the fencing guard), with the segment's running total of units sold, then the order and its ledger rows, inserted only if every segment write went
 * through. One round trip, planned once per connection; a single statement is atomic by itself, and the caller wraps
 * several segments in a transaction so that a partial write can be rolled back.
 *
 * Returns how many segment rows were written, and the order's creation time when it was inserted.
 */
export async function commitDeduction(
  db: Kysely<Database> | Transaction<Database>,
  commit: DeductionCommit,
): Promise<{ written: number; createdAt: Date | null }> {
  const d = commit.deductions;
  const [row] = await runPrepared<{ written: number; created_at: Date | null }>(db, commitStatement, [
    d.map((x) => x.segment),
    d.map((x) => x.availableSeen - x.quantity),
    d.map((x) => x.fence),
    d.map((x) => x.fenceSeen),
    commit.skuId,
    commit.layoutVersion,
    commit.orderId,
    commit.quantity,
    commit.idempotencyKey,
    commit.requestFingerprint,
    d.map((x) => x.quantity),
  ]);
  return { written: row!.written, createdAt: row!.created_at };
}

/** One order of a batch served from one segment. */
export interface BatchedOrder {
  orderId: string;
  quantity: number;
  idempotencyKey: string | null;
  requestFingerprint: string | null;
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
  orders: BatchedOrder[];
}

const batchStatement: PreparedStatement = {
  name: 'commit_batch',
  text: `
    with guard as (
      select 1 from stock_segments
       where sku_id = $1::int and layout_version = $2::int and segment = $3::int
         and fence_token = $5::bigint and fence_token < $6::bigint
         for update
    ), placed as (
      insert into orders (id, sku_id, quantity, idempotency_key, request_fingerprint)
      select b.id, $1::int, b.quantity, b.idempotency_key, b.request_fingerprint
        from unnest($7::uuid[], $8::bigint[], $9::text[], $10::text[]) as b(id, quantity, idempotency_key, request_fingerprint)
       where exists (select 1 from guard)
      on conflict (idempotency_key) do nothing
      returning id, quantity, created_at
    ), written as (
      update stock_segments s
         set available = $4::bigint - (select coalesce(sum(quantity), 0) from placed),
             fence_token = $6::bigint,
             sold = s.sold + (select coalesce(sum(quantity), 0) from placed)
       where s.sku_id = $1::int and s.layout_version = $2::int and s.segment = $3::int
         and s.fence_token = $5::bigint and s.fence_token < $6::bigint
      returning 1
    ), ledger as (
      insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
      select id, $1::int, $3::int, $2::int, quantity, $6::bigint from placed
    )
    select (select count(*) from written)::int as written, p.id, p.created_at from (select 1) one
      left join placed p on true`,
};

/**
 * The write half of a combined critical section: the orders a segment's holder decided to serve, in one statement.
 * The segment is written fenced, as for a single order (the row must still carry the token seen at the read, and ours
 * must be newer), with the stock seen less what the placed orders take; each order and its ledger row are inserted
 * only if the fence let the write through. An order whose Idempotency-Key another request already used is skipped
 * (`on conflict do nothing`) and takes nothing, without failing the others.
 *
 * Returns whether the fence let the write through, and the creation time of each order that was placed.
 */
export async function commitBatch(
  db: Kysely<Database>,
  batch: BatchCommit,
): Promise<{ written: boolean; placed: Map<string, Date> }> {
  const rows = await runPrepared<{ written: number; id: string | null; created_at: Date | null }>(db, batchStatement, [
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
  ]);
  const placed = new Map<string, Date>();
  for (const row of rows) if (row.id !== null && row.created_at !== null) placed.set(row.id, row.created_at);
  return { written: rows[0]!.written === 1, placed };
}
