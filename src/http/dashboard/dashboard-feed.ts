import type { Response } from 'express';
import { AppError, errorCatalog } from '../../errors.js';
import type { StockEvent } from '../../events/event-types.js';
import type { SkuView } from '../../stock/sku-view.js';
import type { OrderCounters } from '../../metrics/service-metrics.js';

/** What every dashboard watching one SKU on this instance receives, once a second. */
export interface DashboardSnapshot {
  instance: string;
  /** When the snapshot was taken, by the shared clock (the one sale windows follow), so a countdown counts to it. */
  at: string;
  sku: string;
  /** The SKU's stock (one SKU view statement), or null with `problem` when it cannot be read. */
  view: SkuView | null;
  problem?: string;
  /** Order answers of this instance, all SKUs: per second over the last interval, and by HTTP status since start. */
  ordersPerSecond: number;
  answersByStatus: Record<string, number>;
  lockWaits: number;
  lockWaitsPerSecond: number;
  /** The SKU's newest events, newest first. */
  recentEvents: StockEvent[];
}

interface Watched {
  subscribers: Set<Response>;
  timer: NodeJS.Timeout;
  last?: { counters: OrderCounters; atMs: number; data: string };
  ticking: boolean;
}

export interface DashboardSources {
  readView: (sku: string) => Promise<SkuView>;
  readCounters: () => Promise<OrderCounters>;
  /** The SKU's newest events, newest first; a failed read shows none. */
  readRecentEvents: (sku: string) => Promise<StockEvent[]>;
  /** The shared clock's time. */
  now: () => number;
  instance: string;
  intervalMs?: number;
}

/**
 * Server-sent events for the dashboard. One timer per watched SKU builds one snapshot a second and writes it to
 * every subscriber, so 20 open browsers cost what one does: one SKU view statement per SKU per second per
 * instance, never a read per browser. The timer stops with the last subscriber.
 */
export class DashboardFeed {
  private readonly watched = new Map<string, Watched>();
  private readonly intervalMs: number;

  constructor(private readonly sources: DashboardSources) {
    this.intervalMs = sources.intervalMs ?? 1000;
  }

  subscribe(sku: string, res: Response): void {
    res.status(200).set({
      'Content-Type': 'text/event-stream',
      'Cache-Control': 'no-store',
      // Proxies must pass each event on at once, not buffer the stream.
      'X-Accel-Buffering': 'no',
    });
    res.flushHeaders();
    let watched = this.watched.get(sku);
    if (!watched) {
      const timer = setInterval(() => void this.tick(sku), this.intervalMs);
      watched = { subscribers: new Set(), timer, ticking: false };
      this.watched.set(sku, watched);
      void this.tick(sku);
    } else if (watched.last) {
      res.write(watched.last.data);
    }
    watched.subscribers.add(res);
    res.on('close', () => this.unsubscribe(sku, res));
  }

  /** Ends every stream, so that shutdown does not wait for browsers to leave. */
  close(): void {
    for (const [sku, watched] of this.watched) {
      for (const res of watched.subscribers) res.end();
      clearInterval(watched.timer);
      this.watched.delete(sku);
    }
  }

  private unsubscribe(sku: string, res: Response): void {
    const watched = this.watched.get(sku);
    if (!watched) return;
    watched.subscribers.delete(res);
    if (watched.subscribers.size === 0) {
      clearInterval(watched.timer);
      this.watched.delete(sku);
    }
  }

  private async tick(sku: string): Promise<void> {
    const watched = this.watched.get(sku);
    // A slow database must not pile up reads: the next tick is skipped until this one is done.
    if (!watched || watched.ticking) return;
    watched.ticking = true;
    try {
      const snapshot = await this.snapshot(sku, watched);
      const data = `data: ${JSON.stringify(snapshot)}\n\n`;
      watched.last = { counters: snapshot.counters, atMs: snapshot.atMs, data };
      for (const res of watched.subscribers) res.write(data);
    } catch {
      // Nothing to show this second (the stock read has its own fallback); the next tick tries again.
    } finally {
      watched.ticking = false;
    }
  }

  private async snapshot(
    sku: string,
    watched: Watched,
  ): Promise<DashboardSnapshot & { counters: OrderCounters; atMs: number }> {
    const atMs = Date.now();
    const [view, counters, recentEvents] = await Promise.all([
      this.sources.readView(sku).then(
        (value) => ({ value, problem: undefined }),
        (error: unknown) => ({
          value: null,
          problem: error instanceof AppError ? error.code : 'dependency_unavailable',
        }),
      ),
      this.sources.readCounters(),
      this.sources.readRecentEvents(sku).catch(() => []),
    ]);
    const previous = watched.last;
    const seconds = previous ? (atMs - previous.atMs) / 1000 : 0;
    const rate = (now: number, before: number | undefined) =>
      seconds > 0 && before !== undefined ? Math.max(0, now - before) / seconds : 0;
    const answersByStatus: Record<string, number> = {};
    for (const [outcome, count] of Object.entries(counters.ordersByOutcome)) {
      const status = outcome === 'placed' ? 201 : outcome === 'replayed' ? 200 : statusOf(outcome);
      answersByStatus[status] = (answersByStatus[status] ?? 0) + count;
    }
    return {
      instance: this.sources.instance,
      at: new Date(this.sources.now()).toISOString(),
      sku,
      view: view.value,
      ...(view.problem ? { problem: view.problem } : {}),
      ordersPerSecond: rate(total(counters.ordersByOutcome), previous && total(previous.counters.ordersByOutcome)),
      answersByStatus,
      lockWaits: counters.lockWaits,
      lockWaitsPerSecond: rate(counters.lockWaits, previous?.counters.lockWaits),
      recentEvents,
      counters,
      atMs,
    };
  }
}

const total = (byOutcome: Record<string, number>) => Object.values(byOutcome).reduce((sum, n) => sum + n, 0);

function statusOf(code: string): number {
  return code in errorCatalog ? errorCatalog[code as keyof typeof errorCatalog].status : 500;
}
