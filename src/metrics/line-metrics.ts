import { Counter, Gauge, type Registry } from 'prom-client';
import type { Db } from '../db/database.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import type { LineHooks } from '../lines/line-admissions.js';
import { type LineFigures, readLineFigures } from './metrics.repository.js';
import { readOncePerScrape } from './service-metrics.js';

/**
 * The waiting lines' metrics, in the service's registry. A line's length and its sold-out moment are read from
 * Postgres at scrape time, so every instance answers the same (across cluster workers, one answer); admissions are
 * counted by the instance that recorded them, through the lines' hooks, so the fleet's sum is the line's.
 */
export class LineMetrics {
  private readonly admissions: Counter<'sku'>;

  constructor(registry: Registry, { db, clock }: { db: Db; clock: Pick<SharedClock, 'now'> }) {
    const read = readOncePerScrape(() => readLineFigures(db, new Date(clock.now())));
    const perLine = (name: string, help: string, value: (line: LineFigures) => number | null) =>
      new Gauge({
        name,
        help,
        labelNames: ['sku'] as const,
        registers: [registry],
        aggregator: 'first',
        async collect() {
          this.reset();
          for (const line of await read()) {
            const v = value(line);
            if (v !== null) this.set({ sku: line.sku }, v);
          }
        },
      });
    perLine(
      'stock_line_tickets',
      "Tickets given in the SKU's line (lines selling or finished within the hour).",
      (l) => l.tickets,
    );
    perLine(
      'stock_line_waiting',
      "Tickets in the SKU's line not let through yet: the pre-line before the draw; after the sold-out moment, those told sold out.",
      (l) => l.waiting,
    );
    perLine(
      'stock_line_sold_out_timestamp_seconds',
      "When the SKU's line sold out (no unit can come back), unix seconds; absent while it sells.",
      (l) => (l.soldOutAt === null ? null : l.soldOutAt.getTime() / 1000),
    );
    this.admissions = new Counter({
      name: 'stock_line_admissions_total',
      help: "Tickets admitted from the SKU's line (their reservation recorded) by this instance.",
      labelNames: ['sku'] as const,
      registers: [registry],
    });
  }

  readonly hooks: LineHooks = {
    admitted: (sku, tickets) => this.admissions.inc({ sku }, tickets),
  };
}
