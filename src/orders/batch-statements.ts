import type { Kysely, Transaction } from 'kysely';
import { type PreparedStatement, runPrepared } from '../db/database.js';
import type { Database, OrderStatus } from '../db/schema.js';
import { OUTBOX_INSERT } from '../events/outbox.js';
import { FENCE_GUARD_SINCE_READ } from '../inventory/fence-guard.js';

type Executor = Kysely<Database> | Transaction<Database>;

/**
 * The statements an order batch runs, in the order it runs them: the state of the segments it holds, read under their
 * locks (`readSegmentStates`), then the one fenced statement that writes the whole batch (`writeBatchStatement`, run
 * by `runWrite`). Reading placed orders back is ./order.repository.ts.
 */

/** What a lock holder reads: the stock, and the token of the last writer, which its own write will insist on. */
export interface SegmentState {
  segment: number;
  available: number;
  fence: number;
}

const readSegmentsStatement: PreparedStatement = {
  name: 'read_segments',
  text: `select s.available, s.fence_token as fence, w.i::int as i
           from unnest($1::int[], $2::int[], $3::int[]) with ordinality as w(sku_id, layout_version, segment, i)
           join stock_segments s
             on s.sku_id = w.sku_id and s.layout_version = w.layout_version and s.segment = w.segment`,
};

export interface SegmentAddress {
  skuId: number;
  layoutVersion: number;
  segment: number;
}

/**
 * The state of segments of any SKUs, read by their lock holders in one query; in the order asked, undefined where a
 * segment is not part of that layout any more.
 */
export async function readSegmentStates(
  db: Executor,
  segments: readonly SegmentAddress[],
): Promise<(SegmentState | undefined)[]> {
  if (segments.length === 0) return [];
  const rows = await runPrepared<{ available: number; fence: number; i: number }>(db, readSegmentsStatement, [
    segments.map((s) => s.skuId),
    segments.map((s) => s.layoutVersion),
    segments.map((s) => s.segment),
  ]);
  const states: (SegmentState | undefined)[] = segments.map(() => undefined);
  for (const row of rows) {
    states[row.i - 1] = { segment: segments[row.i - 1]!.segment, available: row.available, fence: row.fence };
  }
  return states;
}

/** What an order asks beyond its stock: the fields of its row. */
export interface OrderFields {
  orderId: string;
  idempotencyKey: string | null;
  requestFingerprint: string | null;
  customerId: string | null;
  /** A reservation's hold; null places the order confirmed. */
  holdSeconds: number | null;
}

/** A segment the batch writes: what its lock holder read, and the holder's own fencing token. */
export interface SegmentWrite {
  skuId: number;
  layoutVersion: number;
  segment: number;
  /** Stock the holder read, and the token of the row's last writer at that read. */
  availableSeen: number;
  fenceSeen: number;
  fence: number;
  /** The holder knew the SKU's per-customer limit and claimed its customers' units: a SKU that gained one since is not written. */
  limitClaimed: boolean;
}

/** An order of the batch: its row, and what it takes from which of the batch's segments (indexes into `segments`). */
export interface OrderWrite extends OrderFields {
  /** The order's SKU; null for a cart. */
  skuId: number | null;
  takes: { segment: number; quantity: number }[];
  /** Claim the customer's units of these SKUs first (the SKUs of the order that have a per-customer limit). */
  limitedSkuIds: number[];
}

export interface BatchWrite {
  segments: SegmentWrite[];
  orders: OrderWrite[];
  /** False writes no `order.placed` events (the outbox is off, `Outbox.enabled`); they are written by default. */
  events?: boolean;
}

/** The order row as written: when it was placed, and until when a reservation holds. */
export interface PlacedRow {
  status: OrderStatus;
  createdAt: Date;
  expiresAt: Date | null;
}

export interface BatchWritten {
  /** Indexes of the segments the fence let through; orders on any other segment were not written. */
  written: Set<number>;
  /** The orders placed, by id. An order whose segments were all written but that is missing here lost its key. */
  placed: Map<string, PlacedRow>;
  /** Orders refused by their customer's limit, by id, with the units the customer may still order of that SKU. */
  overLimit: Map<string, { skuId: number; remaining: number }>;
}

/**
 * Every write of a batch in one statement, whether it holds one order or sixty, of one SKU or many. Each segment is
 * written fenced — only where the row still carries the token its holder read and the holder's token is newer — with
 * the stock read less what the placed orders take, and its running totals of units sold and reserved. An order is
 * inserted, with its ledger rows, only if every segment it takes from was written; an order whose Idempotency-Key
 * another request already used is skipped (`on conflict do nothing`) and takes nothing. The placed orders' events go
 * into the outbox from the same `taken` rows as their ledger, one outbox row per SKU of the batch listing its orders in
 * arrival order (the sequencer makes one `order.placed` event of each): an order the fence or its key left out has no
 * event. One statement is atomic by itself and, being the same text for every batch, planned once per connection.
 * The outbox insert is append-only (OUTBOX_INSERT), so it adds no lock that writers of one SKU's different segments
 * would queue on.
 */
export const writeBatchStatement: PreparedStatement = {
  name: 'write_batch',
  text: `
    with seg as (
      select * from unnest($1::int[], $2::int[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], $7::boolean[])
        with ordinality as w(sku_id, layout_version, segment, available_seen, fence_seen, fence, limit_claimed, i)
    ), guard as (
      select w.i from stock_segments s join seg w
          on s.sku_id = w.sku_id and s.layout_version = w.layout_version and s.segment = w.segment
       where ${FENCE_GUARD_SINCE_READ}
         and (w.limit_claimed or (select k.max_per_customer from skus k where k.id = w.sku_id) is null)
         for update of s
    ), ord as (
      select * from unnest($8::uuid[], $9::int[], $10::bigint[], $11::text[], $12::text[], $13::int[], $14::text[])
        with ordinality as b(id, sku_id, quantity, idempotency_key, request_fingerprint, hold, customer_id, o)
    ), take as (
      select * from unnest($15::int[], $16::int[], $17::bigint[]) as t(o, i, quantity)
    ), placed as (
      insert into orders (id, sku_id, quantity, idempotency_key, request_fingerprint, status, customer_id, expires_at)
      select b.id, b.sku_id, b.quantity, b.idempotency_key, b.request_fingerprint,
             case when b.hold is null then 'confirmed' else 'reserved' end, b.customer_id,
             now() + b.hold * interval '1 second'
        from ord b
       where not exists (select 1 from take t where t.o = b.o and t.i not in (select i from guard))
      on conflict (idempotency_key) where idempotency_key is not null do nothing
      returning id, status, created_at, expires_at
    ), taken as (
      select t.i, p.status, t.quantity, b.id, b.o
        from take t join ord b on b.o = t.o join placed p on p.id = b.id
    ), written as (
      update stock_segments s
         set available = w.available_seen - coalesce((select sum(quantity) from taken where taken.i = w.i), 0),
             fence_token = w.fence,
             sold = s.sold + coalesce((select sum(quantity) from taken where taken.i = w.i and status = 'confirmed'), 0),
             reserved = s.reserved
               + coalesce((select sum(quantity) from taken where taken.i = w.i and status = 'reserved'), 0)
        from seg w
       where w.i in (select i from guard)
         and s.sku_id = w.sku_id and s.layout_version = w.layout_version and s.segment = w.segment
      returning w.i
    ), ledger as (
      insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
      select t.id, w.sku_id, w.segment, w.layout_version, t.quantity, w.fence from taken t join seg w on w.i = t.i
    ), placed_per_sku as (
      select w.sku_id, t.o, t.id, t.status, sum(t.quantity) as quantity
        from taken t join seg w on w.i = t.i
       group by w.sku_id, t.o, t.id, t.status
    ), events as (
      ${OUTBOX_INSERT}
      select sku_id, 'order.placed',
             jsonb_build_object('orders', jsonb_agg(
               jsonb_build_object('orderId', id, 'status', status, 'quantity', quantity) order by o)),
             -sum(quantity),
             coalesce(sum(quantity) filter (where status = 'reserved'), 0),
             coalesce(sum(quantity) filter (where status = 'confirmed'), 0),
             now()
        from placed_per_sku
       where $18::boolean
       group by sku_id
    )
    select i::int as segment, null::uuid as id, null::text as status, null::timestamptz as created_at,
           null::timestamptz as expires_at
      from written
    union all
    select null, id, status, created_at, expires_at from placed`,
};

export async function runWrite(db: Executor, batch: BatchWrite): Promise<Omit<BatchWritten, 'overLimit'>> {
  const { segments: s, orders: o } = batch;
  const takes = o.flatMap((order, index) => order.takes.map((t) => ({ ...t, order: index + 1 })));
  const rows = await runPrepared<{
    segment: number | null;
    id: string | null;
    status: OrderStatus | null;
    created_at: Date | null;
    expires_at: Date | null;
  }>(db, writeBatchStatement, [
    s.map((x) => x.skuId),
    s.map((x) => x.layoutVersion),
    s.map((x) => x.segment),
    s.map((x) => x.availableSeen),
    s.map((x) => x.fenceSeen),
    s.map((x) => x.fence),
    s.map((x) => x.limitClaimed),
    o.map((x) => x.orderId),
    o.map((x) => x.skuId),
    o.map((x) => x.takes.reduce((total, t) => total + t.quantity, 0)),
    o.map((x) => x.idempotencyKey),
    o.map((x) => x.requestFingerprint),
    o.map((x) => x.holdSeconds),
    o.map((x) => x.customerId),
    takes.map((t) => t.order),
    // Ordinality counts from 1.
    takes.map((t) => t.segment + 1),
    takes.map((t) => t.quantity),
    batch.events ?? true,
  ]);
  const written = new Set<number>();
  const placed = new Map<string, PlacedRow>();
  for (const row of rows) {
    if (row.segment !== null) written.add(row.segment - 1);
    else placed.set(row.id!, { status: row.status!, createdAt: row.created_at!, expiresAt: row.expires_at });
  }
  return { written, placed };
}
