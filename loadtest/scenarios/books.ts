import type { Db } from '../../src/db/database.js';
import { auditStock, booksViolations } from '../../test/support/invariants.js';
import type { StockApi } from '../client/stock-api.js';
import type { Books } from '../results.js';

export interface BooksQuestion {
  sku: string;
  /** Σ quantities of the 201 answers the load generator received. */
  answeredUnits: number;
  /**
   * Exact: every request was answered, so sold must equal answeredUnits. A warm-up round is cut off by time and
   * may leave a few requests unanswered that the service still completed: sold may exceed answeredUnits by those.
   */
  exact: boolean;
  unansweredAtMost?: number;
  /** Units the SKU had sold before the round (spread traffic measures on the SKUs its warm-up used). */
  soldBefore?: number;
  /** Where the stock lives: the SKU's segments (the product) or the Redis baseline's counter. */
  stockIn?: 'segments' | 'redis-counter';
}

/** Checks a SKU's books through the API and, when reachable, straight in Postgres. */
export async function checkBooks(api: StockApi, db: Db | null, question: BooksQuestion): Promise<Books> {
  const checks: Books['checks'] = [];
  const check = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
  const view = await api.sku(question.sku);
  let available = view.available;
  if (question.stockIn === 'redis-counter') {
    available = (await api.redisCounter(question.sku)) ?? view.available;
  } else {
    const negative = view.segmentStock.filter((s) => s.available < 0);
    check(
      'no segment below 0 (API)',
      negative.length === 0,
      `${negative.length} negative of ${view.segmentStock.length}`,
    );
  }
  const sold = view.sold;
  if (question.exact) {
    const before = question.soldBefore ?? 0;
    check(
      'units sold = Σ 201 quantities (API)',
      sold - before === question.answeredUnits,
      `sold ${sold}${before ? ` (${before} before the round)` : ''}, answered ${question.answeredUnits}`,
    );
  } else {
    const slack = question.unansweredAtMost ?? 0;
    const ok = sold >= question.answeredUnits && sold - question.answeredUnits <= slack;
    check(
      'units sold ≥ Σ 201 quantities, by at most the unanswered requests (API)',
      ok,
      `sold ${sold}, answered ${question.answeredUnits}, unanswered ≤ ${slack}`,
    );
  }
  check('available + sold = stock (API)', available + sold === view.stock, `${available} + ${sold} vs ${view.stock}`);

  if (db) {
    const audit = await auditStock(db, question.sku);
    if (!audit) throw new Error(`SKU ${question.sku} is not in Postgres`);
    check('Σ ledger = units sold (Postgres)', audit.sold === sold, `ledger ${audit.sold}, API ${sold}`);
    // The Redis counter baseline keeps its stock in Redis: its segments never go down, so only its ledger is checked.
    if (question.stockIn !== 'redis-counter') {
      const wrong = booksViolations(audit);
      check('books exact (Postgres, the tests’ books checker)', wrong.length === 0, wrong.join('; ') || 'exact');
    }
  }
  return {
    ok: checks.every((c) => c.ok),
    checks,
    stock: view.stock,
    available,
    sold,
    answeredUnits: question.answeredUnits,
    oversold: Math.max(0, sold + available - view.stock),
  };
}
