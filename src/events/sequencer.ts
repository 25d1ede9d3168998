import { sql } from 'kysely';
import { arrayLiteral, type Db } from '../db/database.js';
import type { Logger } from '../logger.js';
import { derivedTypes, type EventType, type SkuTotals, thresholdAfter } from './event-types.js';
import { PeriodicJob } from './periodic-job.js';

/** Outbox rows moved per transaction: bounded, so one run never holds the sequencer lock for long. */
const BATCH = 500;

/** What the sequencer knows of a SKU: its last sequence number, its totals after it, its low-stock threshold. */
interface SkuState extends SkuTotals {
  lastSequence: number;
  lowStockThreshold: number | null;
}

/**
 * What the sequencer reads of an outbox row: what it takes to number it. The row's data and time stay in Postgres
 * (they move from the outbox row into the event there); only a row that sets a low-stock threshold has its data read.
 * A batch's row of placed orders (`data.orders`, one per order of the batch on that SKU) has each order's status and
 * quantity read instead, for the SKU's totals after each of its events.
 */
interface OutboxRow {
  id: number;
  xid: string;
  sku_id: number;
  sku: string;
  type: EventType;
  data: Record<string, unknown> | null;
  d_available: number;
  d_reserved: number;
  d_sold: number;
  placed: [status: string, quantity: number][] | null;
}

/**
 * An event as the sequencer numbers it: the outbox row it comes from (whose data and time it takes; from a row of
 * placed orders, the data of its order number `item`) and, for an event derived from that row's change, its own data
 * (JSON text). Postgres adds the SKU's totals to the data.
 */
interface SequencedEvent {
  position: number;
  sourceId: number;
  item: number | null;
  skuId: number;
  sku: string;
  type: EventType;
  sequence: number;
  totals: SkuTotals;
  derivedData: string | null;
}

/**
 * Gives committed outbox rows their place in the feed: a global position (the cursor), the SKU's next sequence number
 * and the SKU's available, reserved and sold after the event; derives `sku.low_stock`, `sku.sold_out` and
 * `sku.back_in_stock` from those totals; moves the rows into `events`, all in one transaction.
 *
 * Why a sequencer, not numbers given by the writers: batches of one hot SKU write its different segments at once, on
 * different segment locks. A per-SKU counter row updated by each of them would make them queue on that row's lock
 * until each commits, undoing what the segments are for; and a number taken from a sequence is burnt by a rollback,
 * leaving a gap. So writers only append to the outbox (no shared row), with their transaction id (`xid`) and what
 * they did to the SKU's totals; the sequencer, one at a time, numbers what has committed.
 *
 * Why `xid < pg_snapshot_xmin(pg_current_snapshot())`: an id given at insert is not a commit order. A row with a
 * smaller id (or xid) may commit after one with a larger, and a reader taking "everything after the last one I saw"
 * would skip it for good. Every transaction whose xid is below the snapshot's xmin has ended, so the set of committed
 * rows below it can no longer grow: taking them in (xid, id) order, and nothing at or above xmin, never passes over a
 * row that commits later. Nor can a row come after the last one moved and sort before it (its transaction got its xid
 * after that run's snapshot, so above its xmin): each run reads on from the last (xid, id) it moved. The order is
 * consistent with each segment's history: two changes of one segment run one
 * after the other under its lock, the second starting (and taking its xid) after the first committed; changes of
 * different segments commute, so each SKU's running totals are exact after every event.
 *
 * Who sequences: any instance, one at a time — the holder of the `event_sequencer` row's lock (`for update skip
 * locked`: the others skip a turn). Its transaction numbers, writes `events`, updates the per-SKU state and deletes
 * the outbox rows at once, so each committed change gets exactly one event, and a sequencer killed midway numbered
 * nothing. The position comes from that same row, so the feed's order is the sequencer's commit order.
 */
export class EventSequencer {
  private readonly job: PeriodicJob;

  constructor(
    private readonly db: Db,
    intervalMs: number,
    log: Logger,
    private readonly onSequenced: (type: EventType, count: number) => void = () => {},
  ) {
    this.job = new PeriodicJob(
      intervalMs,
      () => this.drain(),
      (error) => log.warn({ err: error.message }, 'events not sequenced yet; retried'),
    );
  }

  start(): void {
    this.job.start();
  }

  stop(): Promise<void> {
    return this.job.stop();
  }

  /** Runs until the committed outbox is empty (or another instance sequences). */
  async drain(): Promise<void> {
    while ((await this.runOnce()) === BATCH);
  }

  /** One transaction: up to BATCH committed outbox rows become events. Answers how many rows it moved. */
  async runOnce(): Promise<number> {
    const events = await this.sequence();
    const counts = new Map<EventType, number>();
    for (const e of events.sequenced) counts.set(e.type, (counts.get(e.type) ?? 0) + 1);
    counts.forEach((count, type) => this.onSequenced(type, count));
    return events.moved;
  }

  /**
   * One transaction of four round trips whatever it moves: begin; read the head (locked), the rows after it and their
   * SKUs' state in one query; write the events, the SKUs' new state, the head and the outbox deletion in one
   * statement; commit. The rest of the instances find the head locked and skip their turn.
   */
  private sequence(): Promise<{ moved: number; sequenced: SequencedEvent[] }> {
    return this.db.transaction().execute(async (trx) => {
      const { rows } = await readOutbox().execute(trx);
      const head = rows[0];
      if (!head || head.id === null || head.id === undefined) return { moved: 0, sequenced: [] };

      const states = new Map<number, SkuState>();
      let position = Number(head.last_position);
      const events: SequencedEvent[] = [];
      for (const row of rows as (HeadRow & OutboxRow & StateRow)[]) {
        let state = states.get(row.sku_id);
        if (!state) {
          state = {
            lastSequence: Number(row.last_sequence ?? 0),
            available: Number(row.available ?? 0),
            reserved: Number(row.reserved ?? 0),
            sold: Number(row.sold ?? 0),
            lowStockThreshold: row.low_stock_threshold === null ? null : Number(row.low_stock_threshold),
          };
          states.set(row.sku_id, state);
        }
        state.lowStockThreshold = thresholdAfter(row.data, state.lowStockThreshold);
        // One event per placed order of a batch's row, each with the SKU's totals after it; one for any other row.
        const changes = row.placed
          ? row.placed.map(([status, quantity], item) => ({
              item,
              available: -quantity,
              reserved: status === 'reserved' ? quantity : 0,
              sold: status === 'confirmed' ? quantity : 0,
            }))
          : [
              {
                item: null,
                available: Number(row.d_available),
                reserved: Number(row.d_reserved),
                sold: Number(row.d_sold),
              },
            ];
        for (const change of changes) {
          const before = state.available;
          state.available += change.available;
          state.reserved += change.reserved;
          state.sold += change.sold;
          const cause = { id: String(position + 1), type: row.type };
          const emit = (type: EventType, item: number | null, derivedData: string | null) =>
            events.push({
              position: ++position,
              sourceId: row.id,
              item,
              skuId: row.sku_id,
              sku: row.sku,
              type,
              sequence: ++state.lastSequence,
              totals: { available: state.available, reserved: state.reserved, sold: state.sold },
              derivedData,
            });
          emit(row.type, change.item, null);
          for (const type of derivedTypes(row.type, before, state)) {
            emit(type, null, JSON.stringify({ cause, lowStockThreshold: state.lowStockThreshold }));
          }
        }
      }

      const last = rows.at(-1)!;
      const skuStates = [...states];
      // One array parameter per column, written as a literal here (one event per order on spread traffic).
      const event = (value: (e: SequencedEvent) => unknown) => arrayLiteral(events.map(value));
      const skuState = (value: (entry: [number, SkuState]) => unknown) => arrayLiteral(skuStates.map(value));
      // Every step by a primary key (the outbox's is its (xid, id)), never by a join the planner might turn into a
      // scan: the outbox churns, and a scan of it would grow with whatever it has not vacuumed yet. The events take
      // their data and time from the outbox rows as they are deleted (a join of two lists of at most BATCH rows), so
      // an event's data never travels to this process and back. Should the deletion find other rows than were read,
      // the head is not moved and the whole transaction is rolled back.
      const { rows: moved } = await sql<{ id: number }>`
        with moved_rows as (
          -- Exactly the rows read: all below the snapshot's xmin, so none can have joined that range since.
          delete from event_outbox
           where (xid, id) > (${head.last_xid}::xid8, ${head.last_id}::bigint)
             and (xid, id) <= (${last.xid}::xid8, ${last.id}::bigint)
          returning id, data, occurred_at
        ), moved_events as (
          insert into events (position, sku_id, sku, type, sequence, occurred_at, data)
          select e.position, e.sku_id, e.sku, e.type, e.sequence, m.occurred_at,
                 coalesce(e.data, case when e.item is null then m.data
                                       else jsonb_build_object('order', m.data->'orders'->e.item) end)
                   || jsonb_build_object('available', e.available, 'reserved', e.reserved, 'sold', e.sold)
            from unnest(${event((e) => e.position)}::bigint[], ${event((e) => e.sourceId)}::bigint[],
                        ${event((e) => e.item)}::int[], ${event((e) => e.skuId)}::int[], ${event((e) => e.sku)}::text[],
                        ${event((e) => e.type)}::text[], ${event((e) => e.sequence)}::bigint[],
                        ${event((e) => e.totals.available)}::bigint[], ${event((e) => e.totals.reserved)}::bigint[],
                        ${event((e) => e.totals.sold)}::bigint[], ${event((e) => e.derivedData)}::jsonb[])
                   as e(position, source_id, item, sku_id, sku, type, sequence, available, reserved, sold, data)
            join moved_rows m on m.id = e.source_id
        ), sku_states as (
          insert into event_sku_state (sku_id, last_sequence, available, reserved, sold, low_stock_threshold)
          select * from unnest(${skuState(([id]) => id)}::int[], ${skuState(([, s]) => s.lastSequence)}::bigint[],
                               ${skuState(([, s]) => s.available)}::bigint[], ${skuState(([, s]) => s.reserved)}::bigint[],
                               ${skuState(([, s]) => s.sold)}::bigint[],
                               ${skuState(([, s]) => s.lowStockThreshold)}::bigint[])
          on conflict (sku_id) do update
            set last_sequence = excluded.last_sequence, available = excluded.available,
                reserved = excluded.reserved, sold = excluded.sold, low_stock_threshold = excluded.low_stock_threshold
        )
        update event_sequencer set last_position = ${position}, last_xid = ${last.xid}::xid8, last_id = ${last.id}
         where id = 1 and (select count(*) from moved_rows) = ${rows.length}
        returning id`.execute(trx);
      if (moved.length === 0) throw new Error('the outbox rows deleted were not the rows read; nothing sequenced');
      return { moved: rows.length, sequenced: events };
    });
  }
}

/**
 * The sequencer's read, under the head's lock: the committed outbox rows after the last one moved, oldest first, at
 * most BATCH of them, each with its SKU's name and its SKU's state as the last run left it (null for a SKU without
 * events yet). Exported for the test of its plan.
 *
 * It reads on after the last row moved: every row before it is gone, and scanning from the index's start would walk
 * over all of them until vacuum removes them, a cost that grows with how much went through the outbox. A row's SKU
 * name and state are each looked up by key, row by row: joined as tables, the planner may hash all of `skus` or all
 * of `event_sku_state` instead, and every run would cost as much as the catalogue is large. (The state's lookup says
 * `limit 1` so that the planner cannot flatten it back into a join.)
 */
export function readOutbox() {
  return sql<HeadRow & Partial<OutboxRow> & Partial<StateRow>>`
    select h.last_position, h.last_xid::text as last_xid, h.last_id,
           o.id, o.xid::text as xid, o.sku_id, o.sku, o.type, o.d_available, o.d_reserved, o.d_sold,
           case when o.data ?| array['sku', 'threshold'] then o.data end as data,
           (select jsonb_agg(jsonb_build_array(p->'status', p->'quantity'))
              from jsonb_array_elements(o.data->'orders') p) as placed,
           st.last_sequence, st.available, st.reserved, st.sold, st.low_stock_threshold
      from event_sequencer h
      left join lateral (
        select o.id, o.xid, o.sku_id, (select k.sku from skus k where k.id = o.sku_id) as sku, o.type, o.data,
               o.d_available, o.d_reserved, o.d_sold
          from event_outbox o
         where (o.xid, o.id) > (h.last_xid, h.last_id)
           and o.xid < pg_snapshot_xmin(pg_current_snapshot())
         order by o.xid, o.id
         limit ${BATCH}) o on true
      left join lateral (
        select st.last_sequence, st.available, st.reserved, st.sold, st.low_stock_threshold
          from event_sku_state st
         where st.sku_id = o.sku_id
         limit 1) st on true
     where h.id = 1
     order by o.xid, o.id
       for update of h skip locked`;
}

interface HeadRow {
  last_position: number;
  last_xid: string;
  last_id: number;
}

/** The SKU's state as the last run left it; all null for a SKU without events yet. */
interface StateRow {
  last_sequence: number | null;
  available: number | null;
  reserved: number | null;
  sold: number | null;
  low_stock_threshold: number | null;
}
