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
    for (;;) {
      const result = await sql`
        delete from events where position in (
          select position from events where occurred_at < ${cutoff}
           order by occurred_at limit ${BATCH} for update skip locked)`.execute(this.db);
      const n = Number(result.numAffectedRows ?? 0);
      deleted += n;
      if (n < BATCH) break;
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
