import { sql } from 'kysely';
import type { Db } from '../db/database.js';
import type { Logger } from '../logger.js';
import { PeriodicJob } from './periodic-job.js';

/** Rows deleted per statement: small, so a delete holds few locks for a short time and never stalls orders. */
const BATCH = 1000;

/**
 * Deletes events (and webhook delivery records) older than the retention, in the background, a small batch per
 * statement until none is left. Rows being deleted by another instance are skipped, not waited for. The order path
 * never reads `events`, so its cost does not depend on how much is kept.
 */
export class EventRetention {
  private readonly job: PeriodicJob;

  constructor(
    private readonly db: Db,
    private readonly retentionMs: number,
    log: Logger,
  ) {
    // Often enough that at most a tenth of the retention is overdue, at most once a minute.
    const every = Math.max(1_000, Math.min(60_000, Math.floor(retentionMs / 10)));
    this.job = new PeriodicJob(
      every,
      () => this.sweep(),
      (error) => log.warn({ err: error.message }, 'event retention retried later'),
    );
  }

  start(): void {
    this.job.start();
  }

  stop(): Promise<void> {
    return this.job.stop();
  }

  /** Deletes everything past retention; answers how many events went. */
  async sweep(): Promise<number> {
    const cutoff = new Date(Date.now() - this.retentionMs);
    let deleted = 0;
    // Oldest first by position (the primary key), BATCH positions per statement, each reading on after the last:
    // the index entries of the rows just deleted stay until vacuum, and a scan from the start would walk over all of
    // them again. The expired events among those positions go; a statement that meets an event inside the retention
    // is the last (positions follow the order events were sequenced in, which can differ from their time by the
    // length of a transaction), and expired events past it wait for the next sweep.
    for (let after = 0; ;) {
      const { rows } = await sql<{ gone: number; last: string | null }>`
        with oldest as (
          select position, occurred_at from events where position > ${after}
           order by position limit ${BATCH} for update skip locked
        ), gone as (
          delete from events e using oldest o
           where e.position = o.position and o.occurred_at < ${cutoff}
          returning e.position
        )
        select count(*)::int as gone, max(position)::text as last from gone`.execute(this.db);
      const { gone, last } = rows[0]!;
      deleted += gone;
      // Fewer than BATCH gone: the statement met an event inside the retention, a row another sweep holds, or the end.
      if (gone < BATCH || last === null) break;
      after = Number(last);
    }
    for (;;) {
      const result = await sql`
        delete from webhook_deliveries where id in (
          select id from webhook_deliveries where attempted_at < ${cutoff}
           order by attempted_at limit ${BATCH} for update skip locked)`.execute(this.db);
      if (Number(result.numAffectedRows ?? 0) < BATCH) break;
    }
    return deleted;
  }
}
