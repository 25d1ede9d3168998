import { performance } from 'node:perf_hooks';
import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database } from '../db/schema.js';
import { PeriodicJob } from '../events/periodic-job.js';
import type { Logger } from '../logger.js';
import { type BooksProblem, booksProblems, readBooks, readRecentBooks, type RecentBooks } from './books.js';

/** What one pass may check: its share of the sweep, the SKUs changed since the last pass, and the feed it reads. */
export interface AuditBounds {
  /** SKUs of the sweep over the whole catalogue checked per pass, at most. */
  sweepSkus: number;
  /** A pass stops sweeping once its whole checks have taken this long (it ends the SKU it is on). */
  sweepSliceMs: number;
  /**
   * The share of the time the sweep may take (0–1]: after a slice that took t, the sweep waits t × (1/share − 1)
   * before its next one, whoever runs it. A whole check costs as much as the SKU has ever sold; this keeps what the
   * sweep costs a second the same however long the ledger grows: the full pass takes longer instead.
   */
  sweepShare: number;
  /** SKUs with new events checked per pass; more wait for the next pass. */
  changedSkus: number;
  /** Events read per pass to find them. */
  feedEvents: number;
}

/** The first key of the audit's advisory lock (the webhook senders' is 20). */
const AUDIT_LOCK_NAMESPACE = 21;

export const DEFAULT_AUDIT_BOUNDS: AuditBounds = {
  sweepSkus: 100,
  sweepSliceMs: 100,
  sweepShare: 0.05,
  changedSkus: 1_000,
  feedEvents: 10_000,
};

/** A pass ran (`checked` SKUs, `fullPass`: it ended a sweep), or another instance's pass was under way. */
export type PassResult = { ran: true; checked: number; fullPass: boolean } | { ran: false };

/**
 * The books audit, in the background: every `intervalMs` it checks SKUs' books (./books.ts) and keeps what is off in
 * `audit_findings`, which `GET /audit` and the metrics read.
 *
 * Incremental: each pass checks the SKUs whose events the feed gained since the last pass (the audit reads the feed as
 * any consumer does, after its own cursor: nothing is added to the order path), each from its running totals and the
 * orders the events name (`readRecentBooks`: O(segments + those orders), however long the SKU's history); and a slice
 * of a sweep over every SKU by id, which reads each SKU's whole books (`readBooks`) and so also finds what no event
 * announces: a row changed by hand, a change made with events off, a ledger that disagrees with the counters. A sweep
 * that reaches the last SKU is a full pass. Bounded: at most `bounds` SKUs and events per pass, whatever the catalogue
 * and the traffic, and the sweep to its share of the time; the rest waits for the next pass.
 *
 * A finding is cleared only by a whole check: a check of recent changes adds what it finds to the SKU's finding but
 * cannot tell that a whole-history problem is gone.
 *
 * One auditor at a time: a pass runs in a transaction holding a transaction-level advisory lock, which another
 * instance tries for (`pg_try_advisory_xact_lock`) and, finding it held, skips its turn rather than waits; the pass's
 * findings and cursors commit together, and an auditor killed midway moved nothing. Not a row lock on `audit_state`, as
 * the sequencer takes on its row: locking a row gives the transaction an id, and the sequencer moves only outbox rows
 * older than every transaction running, so each pass would hold the event feed back for its whole length. The
 * advisory lock takes none; the pass writes (and so takes an id) only at its end, and where it finds books off.
 */
export class BooksAudit {
  private readonly job: PeriodicJob | undefined;

  constructor(
    private readonly db: Db,
    /** 0: no background passes (`runPass` still works). */
    intervalMs: number,
    log: Logger,
    private readonly bounds: AuditBounds = DEFAULT_AUDIT_BOUNDS,
  ) {
    this.job =
      intervalMs > 0
        ? new PeriodicJob(
            intervalMs,
            () => this.runPass(),
            (error) => log.warn({ err: error.message }, 'books audit retried later'),
          )
        : undefined;
  }

  start(): void {
    this.job?.start();
  }

  async stop(): Promise<void> {
    await this.job?.stop();
  }

  /** One pass, unless another instance is auditing now. */
  runPass(): Promise<PassResult> {
    return this.db.transaction().execute(async (trx) => {
      const { rows } = await sql<{ mine: boolean }>`
        select pg_try_advisory_xact_lock(${AUDIT_LOCK_NAMESPACE}, 0) as mine`.execute(trx);
      if (!rows[0]!.mine) return { ran: false };
      const state = await trx
        .selectFrom('audit_state')
        .select(['feed_position', 'sweep_after', 'sweep_started_at'])
        .select(sql<boolean>`sweep_due_at is null or sweep_due_at <= now()`.as('sweep_due'))
        .where('id', '=', 1)
        .executeTakeFirstOrThrow();
      const changed = await this.changedSince(trx, state.feed_position);
      for (const [skuId, books] of await readRecentBooks(trx, changed.orders))
        await this.checkRecent(trx, skuId, books);
      const sweep = state.sweep_due ? await this.sweep(trx, state.sweep_after) : undefined;
      const fullPass = sweep?.ended ?? false;
      const sweepStartedAt = state.sweep_after === 0 ? sql<Date>`now()` : sql<Date | null>`sweep_started_at`;
      await trx
        .updateTable('audit_state')
        .set({
          feed_position: changed.position,
          last_pass_at: sql<Date>`now()`,
          ...(sweep && {
            sweep_after: fullPass ? 0 : sweep.after,
            sweep_started_at: fullPass ? null : sweepStartedAt,
            sweep_due_at: sql<Date>`now() + ${sweep.restMs} * interval '1 millisecond'`,
          }),
          ...(fullPass && {
            last_full_pass_started_at: state.sweep_after === 0 ? sql<Date>`now()` : state.sweep_started_at,
            last_full_pass_at: sql<Date>`now()`,
          }),
        })
        .where('id', '=', 1)
        .execute();
      const checked = new Set([...changed.orders.keys(), ...(sweep?.skuIds ?? [])]);
      return { ran: true, checked: checked.size, fullPass };
    });
  }

  /**
   * The sweep's slice: whole checks of the SKUs after `after` by id until the slice's time is spent, and how long the
   * sweep then rests (`restMs`) to keep to its share. `ended`: it checked the last SKU.
   */
  private async sweep(trx: Transaction<Database>, after: number) {
    const next = await trx
      .selectFrom('skus')
      .select('id')
      .where('id', '>', after)
      .orderBy('id')
      .limit(this.bounds.sweepSkus)
      .execute();
    const started = performance.now();
    const skuIds: number[] = [];
    for (const { id } of next) {
      await this.checkWhole(trx, id);
      skuIds.push(id);
      if (performance.now() - started >= this.bounds.sweepSliceMs) break;
    }
    const spentMs = performance.now() - started;
    return {
      skuIds,
      after: skuIds.at(-1) ?? after,
      ended: skuIds.length === next.length && next.length < this.bounds.sweepSkus,
      restMs: Math.round(spentMs * (1 / this.bounds.sweepShare - 1)),
    };
  }

  /**
   * The SKUs with events after feed position `after`, first come first, at most `changedSkus` of them from at most
   * `feedEvents` events, each with the orders its events name; and the position the next pass reads on from: just
   * before the first event of a SKU left for later, else the last event read.
   */
  private async changedSince(trx: Transaction<Database>, after: number) {
    const { rows } = await sql<{ sku_id: number; first: string; last: string; orders: string[] }>`
      with recent as (
        select position, sku_id, data from events where position > ${after} order by position limit ${this.bounds.feedEvents}
      )
      select sku_id, min(position)::text as first, (select max(position) from recent)::text as last,
             coalesce(array_agg(o.id) filter (where o.id is not null), '{}') as orders
        from recent left join lateral (
          -- order.placed names its batch's orders; the other order events the one order.
          select x ->> 'orderId' as id
            from jsonb_array_elements(coalesce(data -> 'orders', jsonb_build_array(data -> 'order'))) x
        ) o on true
       group by sku_id order by min(position) limit ${this.bounds.changedSkus + 1}`.execute(trx);
    const kept = rows.slice(0, this.bounds.changedSkus);
    const leftOver = rows[this.bounds.changedSkus];
    const position = leftOver ? Number(leftOver.first) - 1 : rows.length > 0 ? Number(rows[0]!.last) : after;
    return { orders: new Map(kept.map((row) => [row.sku_id, row.orders])), position };
  }

  /** A whole check of one SKU's books: its finding is written (its first sighting kept) or, once balanced, deleted. */
  private async checkWhole(trx: Transaction<Database>, skuId: number): Promise<void> {
    const books = await readBooks(trx, skuId);
    const problems = books ? booksProblems(books) : [];
    if (books && problems.length > 0) await this.write(trx, skuId, problems, books);
    else await trx.deleteFrom('audit_findings').where('sku_id', '=', skuId).execute();
  }

  /**
   * A check of one SKU's recent changes: what it finds joins the SKU's finding (a problem of the same check replaced,
   * the others kept); it clears nothing, as it cannot see the whole books a finding may be about.
   */
  /** Adds what a SKU's recent books show to its finding, if they show anything. */
  private async checkRecent(trx: Transaction<Database>, skuId: number, books: RecentBooks): Promise<void> {
    const problems = booksProblems(books);
    if (problems.length === 0) return;
    const found = await trx
      .selectFrom('audit_findings')
      .select('problems')
      .where('sku_id', '=', skuId)
      .executeTakeFirst();
    const seen = new Set(problems.map((problem) => problem.check));
    const kept = ((found?.problems ?? []) as BooksProblem[]).filter((problem) => !seen.has(problem.check));
    await this.write(trx, skuId, [...kept, ...problems], books);
  }

  private async write(trx: Transaction<Database>, skuId: number, problems: BooksProblem[], books: object) {
    await sql`
      insert into audit_findings (sku_id, sku, problems, books, found_at, checked_at)
      select id, sku, ${JSON.stringify(problems)}::jsonb, ${JSON.stringify(books)}::jsonb, now(), now()
        from skus where id = ${skuId}
      on conflict (sku_id) do update
        set problems = excluded.problems, books = excluded.books, checked_at = excluded.checked_at`.execute(trx);
  }
}
