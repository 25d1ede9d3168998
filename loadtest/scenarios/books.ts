import type { Db } from '../../src/db/database.js';
import { auditStock, booksViolations } from '../../test/support/invariants.js';
import type { StockApi } from '../client/stock-api.js';

export type Books = Awaited<ReturnType<typeof checkBooks>>;

export interface BooksQuestion {
  sku: string;
  /** Σ quantities of the 201 answers the load generator received. */
  answeredUnits: number;
  /**
   * Exact: every request was answered, so sold must equal answeredUnits. A warm-up round is cut off by time and
   * may leave up to `unansweredAtMost` units unanswered that the service still sold.
   */
  exact: boolean;
  unansweredAtMost?: number;
  /** Units the SKU had sold before the round (spread traffic measures on the SKUs its warm-up used). */
  soldBefore?: number;
  /** Where the stock lives: the SKU's segments (the product) or the Redis baseline's counter. */
  stockIn?: 'segments' | 'redis-counter';
}

/** Checks a SKU's books through the API and, when reachable, straight in Postgres with the tests' books checker. */
export async function checkBooks(api: StockApi, db: Db | null, question: BooksQuestion) {
  const checks: { name: string; ok: boolean; detail: string }[] = [];
  const check = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
  const view = await api.sku(question.sku);
  const { sold, stock } = view;
  const counter = question.stockIn === 'redis-counter';
  const available = counter ? ((await api.redisCounter(question.sku)) ?? view.available) : view.available;
  if (!counter) {
    const negative = view.segmentStock.filter((s) => s.available < 0).length;
    check('no segment below 0 (API)', negative === 0, `${negative} negative of ${view.segmentStock.length}`);
  }
  const before = question.soldBefore ?? 0;
  const slack = question.exact ? 0 : (question.unansweredAtMost ?? 0);
  check(
    question.exact
      ? 'units sold = Σ 201 quantities (API)'
      : 'units sold ≥ Σ 201 quantities, by at most the unanswered requests (API)',
    sold - before >= question.answeredUnits && sold - before - question.answeredUnits <= slack,
    `sold ${sold}${before ? ` (${before} before the round)` : ''}, answered ${question.answeredUnits}${slack ? `, unanswered ≤ ${slack}` : ''}`,
  );
  check('available + sold = stock (API)', available + sold === stock, `${available} + ${sold} vs ${stock}`);
  if (db) {
    const audit = await auditStock(db, question.sku);
    if (!audit) throw new Error(`SKU ${question.sku} is not in Postgres`);
    check('Σ ledger = units sold (Postgres)', audit.sold === sold, `ledger ${audit.sold}, API ${sold}`);
    // The Redis counter baseline keeps its stock in Redis: its segments never go down, so only its ledger is checked.
    const wrong = counter ? undefined : booksViolations(audit);
    if (wrong)
      check('books exact (Postgres, the tests’ books checker)', wrong.length === 0, wrong.join('; ') || 'exact');
  }
  const answeredUnits = question.answeredUnits;
  return {
    ok: checks.every((c) => c.ok),
    checks,
    stock,
    available,
    sold,
    answeredUnits,
    oversold: Math.max(0, sold + available - stock),
  };
}
