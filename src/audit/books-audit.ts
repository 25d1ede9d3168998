import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database } from '../db/schema.js';
import { PeriodicJob } from '../events/periodic-job.js';
import type { Logger } from '../logger.js';
import { booksProblems, readBooks } from './books.js';

/** What one pass may check: its share of the sweep, the SKUs changed since the last pass, and the feed it reads. */
export interface AuditBounds {
  /** SKUs of the sweep over the whole catalogue checked per pass. */
  sweepSkus: number;
  /** SKUs with new events checked per pass; more wait for the next pass. */
  changedSkus: number;
  /** Events read per pass to find them. */
  feedEvents: number;
}

/** The first key of the audit's advisory lock (the webhook senders' is 20). */
const AUDIT_LOCK_NAMESPACE = 21;

const DEFAULT_BOUNDS: AuditBounds = { sweepSkus: 100, changedSkus: 100, feedEvents: 10_000 };

/** A pass ran (`checked` SKUs, `fullPass`: it ended a sweep), or another instance's pass was under way. */
export type PassResult = { ran: true; checked: number; fullPass: boolean } | { ran: false };

/**
 * The books audit, in the background: every `intervalMs` it checks SKUs' books (./books.ts) and keeps what is off in
 * `audit_findings`, which `GET /audit` and the metrics read.
 *
 * Incremental: each pass checks the SKUs whose events the feed gained since the last pass (the audit reads the feed as
 * any consumer does, after its own cursor: nothing is added to the order path), and a slice of a sweep over every
 * SKU by id, which also finds what no event announces: a row changed by hand, a change made with events off. A sweep
 * that reaches the last SKU is a full pass. Bounded: at most `bounds` SKUs and events per pass, whatever the catalogue
 * and the traffic; the rest waits for the next pass.
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
    private readonly bounds: AuditBounds = DEFAULT_BOUNDS,
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
        .where('id', '=', 1)
        .executeTakeFirstOrThrow();
      const changed = await this.changedSince(trx, state.feed_position);
      const sweep = await trx
        .selectFrom('skus')
        .select('id')
        .where('id', '>', state.sweep_after)
        .orderBy('id')
        .limit(this.bounds.sweepSkus)
        .execute();
      const skuIds = new Set([...changed.skuIds, ...sweep.map((row) => row.id)]);
      for (const skuId of skuIds) await this.check(trx, skuId);
      const fullPass = sweep.length < this.bounds.sweepSkus;
      const sweepStartedAt = state.sweep_after === 0 ? sql<Date>`now()` : sql<Date | null>`sweep_started_at`;
      await trx
        .updateTable('audit_state')
        .set({
          feed_position: changed.position,
          sweep_after: fullPass ? 0 : sweep.at(-1)!.id,
          sweep_started_at: fullPass ? null : sweepStartedAt,
          last_pass_at: sql<Date>`now()`,
          ...(fullPass && {
            last_full_pass_started_at: state.sweep_after === 0 ? sql<Date>`now()` : state.sweep_started_at,
            last_full_pass_at: sql<Date>`now()`,
          }),
        })
        .where('id', '=', 1)
        .execute();
      return { ran: true, checked: skuIds.size, fullPass };
    });
  }

  /**
   * The SKUs with events after feed position `after`, first come first, at most `changedSkus` of them from at most
   * `feedEvents` events, and the position the next pass reads on from: just before the first event of a SKU left
   * for later, else the last event read.
   */
  private async changedSince(trx: Transaction<Database>, after: number) {
    const { rows } = await sql<{ sku_id: number; first: string; last: string }>`
      with recent as (
        select position, sku_id from events where position > ${after} order by position limit ${this.bounds.feedEvents}
      )
      select sku_id, min(position)::text as first, (select max(position) from recent)::text as last
        from recent group by sku_id order by min(position) limit ${this.bounds.changedSkus + 1}`.execute(trx);
    const kept = rows.slice(0, this.bounds.changedSkus);
    const leftOver = rows[this.bounds.changedSkus];
    const position = leftOver ? Number(leftOver.first) - 1 : rows.length > 0 ? Number(rows[0]!.last) : after;
    return { skuIds: kept.map((row) => row.sku_id), position };
  }

  /** Checks one SKU's books: a finding is written (its first sighting kept) or, once balanced, deleted. */
  private async check(trx: Transaction<Database>, skuId: number): Promise<void> {
    const books = await readBooks(trx, skuId);
    const problems = books ? booksProblems(books) : [];
    if (problems.length === 0) {
      await trx.deleteFrom('audit_findings').where('sku_id', '=', skuId).execute();
      return;
    }
    await sql`
      insert into audit_findings (sku_id, sku, problems, books, found_at, checked_at)
      select id, sku, ${JSON.stringify(problems)}::jsonb, ${JSON.stringify(books)}::jsonb, now(), now()
        from skus where id = ${skuId}
      on conflict (sku_id) do update
        set problems = excluded.problems, books = excluded.books, checked_at = excluded.checked_at`.execute(trx);
  }
}
