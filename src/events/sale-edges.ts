import { sql } from 'kysely';
import type { Db } from '../db/database.js';
import type { Logger } from '../logger.js';
import { OUTBOX_INSERT } from './outbox.js';

/** How long the announcer sleeps when no edge is near: a window set or moved meanwhile is seen within this. */
const IDLE_MS = 1_000;
/** How soon it looks again at an edge that is due but was not its to write (another instance, or an admin change, holds the row). */
const BUSY_MS = 50;

/**
 * Writes `sku.sale_opened` and `sku.sale_closed` when the shared clock passes a SKU's `saleStartsAt` / `saleEndsAt`,
 * each with the edge itself as its `occurredAt`. Every instance runs one: it looks for the next edge to announce once
 * a second and, when one is nearer, sleeps until exactly then. The edge is marked announced in the statement that
 * writes its event, on rows locked `for update skip locked`, so whichever instance gets there first writes it and the
 * others find nothing left: once per edge, and again only if a PATCH moves the edge to a new instant.
 *
 * An order placed in the milliseconds between the edge and this statement's commit comes before the event in the SKU's
 * sequence; `occurredAt` still says when the sale opened.
 */
export class SaleEdgeAnnouncer {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly db: Db,
    /** The shared clock's time (ms), the one orders are refused by. */
    private readonly now: () => number,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** Writes the events of every edge the shared clock has passed and nobody announced; answers how many. */
  async announceDue(): Promise<number> {
    const now = new Date(this.now());
    const result = await sql`
      with due as (
        select id, sale_starts_at, sale_ends_at,
               coalesce(sale_starts_at <= ${now} and sale_start_announced is distinct from sale_starts_at, false) as opens,
               coalesce(sale_ends_at <= ${now} and sale_end_announced is distinct from sale_ends_at, false) as closes
          from skus
         where (sale_starts_at <= ${now} and sale_start_announced is distinct from sale_starts_at)
            or (sale_ends_at <= ${now} and sale_end_announced is distinct from sale_ends_at)
           for update skip locked
      ), marked as (
        update skus k
           set sale_start_announced = case when d.opens then d.sale_starts_at else k.sale_start_announced end,
               sale_end_announced = case when d.closes then d.sale_ends_at else k.sale_end_announced end
          from due d
         where k.id = d.id
      )
      ${sql.raw(OUTBOX_INSERT)}
      select id, e.type,
             jsonb_build_object('window', jsonb_build_object('saleStartsAt', sale_starts_at, 'saleEndsAt', sale_ends_at)),
             0, 0, 0, e.at
        from due, lateral (values ('sku.sale_opened', sale_starts_at, opens), ('sku.sale_closed', sale_ends_at, closes))
             as e(type, at, announce)
       where e.announce`.execute(this.db);
    return Number(result.numAffectedRows ?? 0);
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.tick().finally(() => (this.running = undefined));
    }, delayMs);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    let delay = IDLE_MS;
    try {
      await this.announceDue();
      const next = await this.nextEdge();
      if (next !== null) {
        const until = next - this.now();
        delay = until > 0 ? Math.min(IDLE_MS, until) : BUSY_MS;
      }
    } catch (error) {
      this.log.warn({ err: (error as Error).message }, 'sale window events retried later');
    }
    this.schedule(delay);
  }

  /** The earliest edge not yet announced (ms), by the partial indexes; null when there is none. */
  private async nextEdge(): Promise<number | null> {
    const { rows } = await sql<{ at: Date | null }>`
      select least(
        (select min(sale_starts_at) from skus where sale_start_announced is distinct from sale_starts_at),
        (select min(sale_ends_at) from skus where sale_end_announced is distinct from sale_ends_at)) as at`.execute(
      this.db,
    );
    return rows[0]?.at?.getTime() ?? null;
  }
}
