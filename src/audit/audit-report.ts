import { sql } from 'kysely';
import type { Db } from '../db/database.js';
import type { Books, BooksProblem } from './books.js';

/** Unbalanced SKUs an answer lists; `unbalancedCount` counts them all. */
const LISTED = 100;

/** A SKU whose books the audit found off. */
export interface UnbalancedSku {
  sku: string;
  problems: BooksProblem[];
  /** The figures the last check read. */
  books: Books;
  /** When the audit first found it off, and last checked it (still off). */
  foundAt: string;
  checkedAt: string;
}

/** What `GET /audit` answers: the books as the audit last found them, fleet-wide (any instance answers the same). */
export interface AuditReport {
  /** Postgres's clock now: the time the others are to be compared with. */
  at: string;
  /** No SKU off and a full pass done; false: some SKU off; null: nothing found yet, but no full pass either. */
  balanced: boolean | null;
  unbalancedCount: number;
  /** The first 100, oldest finding first. */
  unbalanced: UnbalancedSku[];
  lastPassAt: string | null;
  /** The last sweep that checked every SKU: every SKU's books were read between these two times. */
  lastFullPass: { startedAt: string; finishedAt: string } | null;
}

const iso = (value: Date | null) => value && value.toISOString();

export async function readAuditReport(db: Db): Promise<AuditReport> {
  const [state, listed] = await Promise.all([
    sql<{ at: Date; count: number; last_pass_at: Date | null; started: Date | null; finished: Date | null }>`
      select now() as at, (select count(*) from audit_findings)::int as count, last_pass_at,
             last_full_pass_started_at as started, last_full_pass_at as finished
        from audit_state where id = 1`.execute(db),
    db
      .selectFrom('audit_findings')
      .select(['sku', 'problems', 'books', 'found_at', 'checked_at'])
      .orderBy('found_at')
      .orderBy('sku_id')
      .limit(LISTED)
      .execute(),
  ]);
  const { at, count, last_pass_at, started, finished } = state.rows[0]!;
  return {
    at: at.toISOString(),
    balanced: count > 0 ? false : finished ? true : null,
    unbalancedCount: count,
    unbalanced: listed.map((row) => ({
      sku: row.sku,
      problems: row.problems as BooksProblem[],
      books: row.books as Books,
      foundAt: row.found_at.toISOString(),
      checkedAt: row.checked_at.toISOString(),
    })),
    lastPassAt: iso(last_pass_at),
    lastFullPass: started && finished ? { startedAt: started.toISOString(), finishedAt: finished.toISOString() } : null,
  };
}

/** The audit's figures for the metrics: SKUs off now, and when the last pass and the last full pass ended. */
export interface AuditFigures {
  unbalancedSkus: number;
  lastPassAt: Date | null;
  lastFullPassAt: Date | null;
}

export async function readAuditFigures(db: Db): Promise<AuditFigures> {
  const { rows } = await sql<{ unbalanced: number; last_pass_at: Date | null; last_full_pass_at: Date | null }>`
    select (select count(*) from audit_findings)::int as unbalanced, last_pass_at, last_full_pass_at
      from audit_state where id = 1`.execute(db);
  const row = rows[0]!;
  return { unbalancedSkus: row.unbalanced, lastPassAt: row.last_pass_at, lastFullPassAt: row.last_full_pass_at };
}
