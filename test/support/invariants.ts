import type { Db } from '../../src/db/database.js';
import pMap from 'p-map';
import { type Books, booksProblems, readBooks } from '../../src/audit/books.js';

// The books as the tests, the fault cases (fault-books.ts) and the load test check them: the service's own books
// checker (src/audit/books.ts), by SKU name, with what is off spelled out beside the figures.

export type StockAudit = Books;

/** Books read at once by `auditStocks`: no more than the smallest pool that calls it. */
const BOOKS_READ_AT_ONCE = 4;

/** A SKU's books straight from Postgres, bypassing the service; undefined for an unknown SKU. */
export function auditStock(db: Db, sku: string): Promise<StockAudit | undefined> {
  return readBooks(db, sku);
}

/**
 * The books of several SKUs, by SKU name (a SKU that does not exist has no entry). Each SKU's check reads only its own
 * rows (by the orders' SKU index), so checking a round's hundreds of SKUs costs what they sold, not the whole history.
 * A few at a time: the load test's pool holds four connections, and a read queued behind hundreds of others on a busy
 * machine outwaited the pool's two seconds for a connection and failed the run.
 */
export async function auditStocks(db: Db, skus: string[]): Promise<Map<string, StockAudit>> {
  const read = async (sku: string) => [sku, await readBooks(db, sku)] as const;
  const books = await pMap(skus, read, { concurrency: BOOKS_READ_AT_ONCE });
  return new Map(books.filter((entry): entry is readonly [string, Books] => entry[1] !== undefined));
}

/** Reads a SKU's books straight from Postgres, bypassing the service; the SKU must exist. */
export async function auditSku(db: Db, sku: string): Promise<StockAudit> {
  const audit = await auditStock(db, sku);
  if (!audit) throw new Error(`no SKU ${sku}`);
  return audit;
}

/** What is wrong with a SKU's books, one line each with the figures read; empty when they are exact. */
export function booksViolations(audit: StockAudit): string[] {
  return booksProblems(audit).map(({ check, detail }) => `${check}: ${detail}: ${JSON.stringify(audit)}`);
}
