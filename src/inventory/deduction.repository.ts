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
