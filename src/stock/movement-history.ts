import { type RawBuilder, sql } from 'kysely';
import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import { MOVEMENT_KINDS, type Movement, type MovementKind } from './movement.js';

export interface MovementQuery {
  limit: number;
  /** A `nextCursor` of an earlier page, asked with the same filters. */
  cursor?: string | undefined;
  /** Only these kinds; every kind when not given. */
  kinds?: readonly MovementKind[] | undefined;
  /** Only movements at or after `since` and before `until`. */
  since?: Date | undefined;
  until?: Date | undefined;
}

export interface MovementPage {
  sku: string;
  movements: Movement[];
  /** Where the next (older) page starts; null once the history is done. */
  nextCursor: string | null;
}

/**
 * The tables a movement is read from, in the order movements of the same microsecond are listed (higher first): the
 * additions log, the orders' ledger rows, and the ledger's returns.
 */
const SOURCE = { addition: 1, order: 2, return: 3 } as const;

/** Where a page ends: the last movement's time in microseconds since the epoch, its table and its key there. */
interface Position {
  atMicros: string;
  source: number;
  key: string;
}

interface MovementRow {
  source: number;
  key: string;
  at_micros: string;
  at: Date;
  kind: MovementKind;
  quantity: number;
  reason: string | null;
  actor: string | null;
  note: string | null;
  reference: string | null;
  order_id: string | null;
  available_after: number | null;
}

/**
 * A page of the SKU's movements, newest first, after the cursor; throws sku_not_found. Read from the ledger the
 * service writes anyway, never a copy of it: each kind's rows come off its own index on (SKU, kind, time) in time
 * order, at most `limit + 1` of them, and the kinds merge into the page; so a page costs about `limit` index entries a
 * kind wherever it starts, however long the history. Keyset paging on (time, table, key): movements written meanwhile
 * are newer than the first page, and neither shift nor repeat the pages after it.
 */
export async function readMovements(db: Db, sku: string, query: MovementQuery): Promise<MovementPage> {
  if (query.cursor !== undefined) decodeCursor(query.cursor);
  const target = await db.selectFrom('skus').select('id').where('sku', '=', sku).executeTakeFirst();
  if (!target) throw new AppError('sku_not_found', `SKU '${sku}' does not exist`);
  const { rows } = await movementsStatement(target.id, query).execute(db);
  const shown = rows.slice(0, query.limit);
  const last = shown.at(-1);
  const more = rows.length > query.limit && last !== undefined;
  return {
    sku,
    movements: shown.map(movementOf),
    nextCursor: more ? encodeCursor({ atMicros: last.at_micros, source: last.source, key: last.key }) : null,
  };
}

/** The statement of a page, up to `limit + 1` movements (one more tells whether another page follows); exported for the test of its plan. */
export function movementsStatement(skuId: number, query: MovementQuery): RawBuilder<MovementRow> {
  const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
  const kinds = new Set(query.kinds ?? MOVEMENT_KINDS);
  const take = query.limit + 1;
  /** A branch's conditions on its rows' time: the filters' bounds and, after a cursor, at or before it. */
  const within = (source: number, at: RawBuilder<unknown>, key: RawBuilder<unknown>) => {
    const conditions = [sql`true`];
    if (query.since) conditions.push(sql`${at} >= ${query.since}`);
    if (query.until) conditions.push(sql`${at} < ${query.until}`);
    if (after) {
      const cursorAt = sql`('epoch'::timestamptz + ${after.atMicros}::bigint * interval '1 microsecond')`;
      // Of the cursor's own microsecond, only what sorts after it: a table listed later, or a lower key in its own.
      if (source < after.source) conditions.push(sql`${at} <= ${cursorAt}`);
      else if (source > after.source) conditions.push(sql`${at} < ${cursorAt}`);
      else conditions.push(sql`${at} <= ${cursorAt} and (${at} < ${cursorAt} or ${key} collate "C" < ${after.key})`);
    }
    return sql.join(conditions, sql` and `);
  };
  const branches: RawBuilder<unknown>[] = [];
  for (const kind of ['create', 'restock', 'adjustment', 'count'] as const) {
    if (!kinds.has(kind)) continue;
    // Ids padded to one width, so that the keys of one microsecond sort as text as they do as numbers.
    const key = sql`lpad(a.id::text, 19, '0')`;
    branches.push(sql`(
      select ${SOURCE.addition}::int as source, ${key} as key, a.created_at as at, a.kind, a.quantity, a.reason,
             a.actor, a.note, a.reference, null::uuid as order_id,
             -- A create's available after it is its stock; a restock's is not kept.
             case when a.kind = 'create' then a.quantity else a.available_after end as available_after
        from stock_additions a
       where a.sku_id = ${skuId} and a.kind = ${kind} and ${within(SOURCE.addition, sql`a.created_at`, key)}
       order by a.created_at desc, a.id desc limit ${take})`);
  }
  if (kinds.has('order')) {
    // One movement per order (its rows on the SKU's segments, all written by the order's one statement).
    branches.push(sql`(
      select ${SOURCE.order}::int as source, d.order_id::text as key, d.created_at as at, 'order' as kind,
             -sum(d.quantity) as quantity, null as reason, null as actor, null as note, null as reference,
             d.order_id, null::bigint as available_after
        from stock_deductions d
       where d.sku_id = ${skuId} and ${within(SOURCE.order, sql`d.created_at`, sql`d.order_id::text`)}
       group by d.created_at, d.order_id
       order by d.created_at desc, d.order_id desc limit ${take})`);
  }
  for (const [kind, reason] of [
    ['cancel', 'cancelled'],
    ['expiry', 'expired'],
  ] as const) {
    if (!kinds.has(kind)) continue;
    branches.push(sql`(
      select ${SOURCE.return}::int as source, r.order_id::text as key, r.created_at as at, ${kind}::text as kind,
             sum(r.quantity) as quantity, ${reason}::text as reason, null as actor, null as note, null as reference,
             r.order_id, null::bigint as available_after
        from stock_returns r
       where r.sku_id = ${skuId} and r.reason = ${reason}
         and ${within(SOURCE.return, sql`r.created_at`, sql`r.order_id::text`)}
       group by r.created_at, r.order_id
       order by r.created_at desc, r.order_id desc limit ${take})`);
  }
  if (branches.length === 0) throw new Error('a movement query names no kind');
  return sql<MovementRow>`
    with page as (
      select * from (${sql.join(branches, sql` union all `)}) m
       order by m.at desc, m.source desc, m.key collate "C" desc limit ${take}
    )
    select p.source, p.key, (extract(epoch from p.at) * 1000000)::bigint::text as at_micros, p.at, p.kind,
           p.quantity::bigint as quantity,
           -- A cancel gives back a paid order's units (a refund) when the order had been confirmed: placed without a
           -- hold, or a reservation counted as confirmed; looked up for the page's cancels alone.
           case when p.kind = 'cancel' and exists (select 1 from orders o where o.id = p.order_id
                                                     and (o.expires_at is null or o.confirmed_slot is not null))
                then 'refund' else p.reason end as reason,
           p.actor, p.note, p.reference, p.order_id, p.available_after::bigint as available_after
      from page p
     order by p.at desc, p.source desc, p.key collate "C" desc`;
}

function movementOf(row: MovementRow): Movement {
  const id = row.source === SOURCE.addition ? String(Number(row.key)) : `${row.kind}:${row.key}`;
  return {
    id,
    kind: row.kind,
    quantity: Number(row.quantity),
    reason: row.reason,
    actor: row.actor,
    note: row.note,
    reference: row.reference,
    orderId: row.order_id,
    availableAfter: row.available_after === null ? null : Number(row.available_after),
    at: row.at.toISOString(),
  };
}

const POSITION = /^(\d{1,18})\.([123])\.(\d{19}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

/** The cursor is opaque to clients: where the page ended, from which the next page goes on. */
function encodeCursor(position: Position): string {
  return Buffer.from(`${position.atMicros}.${position.source}.${position.key}`).toString('base64url');
}

/** Only a cursor this service could have given reaches SQL: a position in its one encoding. */
function decodeCursor(cursor: string): Position {
  const match = POSITION.exec(Buffer.from(cursor, 'base64url').toString());
  const position = match && { atMicros: match[1]!, source: Number(match[2]), key: match[3]! };
  const keyFitsSource = position && (position.source === SOURCE.addition) === /^\d+$/.test(position.key);
  if (!position || !keyFitsSource || encodeCursor(position) !== cursor) {
    throw new AppError('bad_request', 'cursor: must be a nextCursor value');
  }
  return position;
}
