import type { Request, Response } from 'express';
import { AppError } from '../../errors.js';
import type { Db } from '../../db/database.js';
import type { StockEvent } from '../../events/event-types.js';
import { skuTimeline } from '../../events/feed.repository.js';
import type { LineView } from '../../lines/ticket-view.js';
import type { FleetSeries, InstanceBeat, SeriesWindow } from '../../metrics/fleet-series.js';
import type { SkuView } from '../../stock/sku-view.js';
import type { AuditReport } from '../../audit/audit-report.js';
import type { StreamGate, StreamOutlet } from '../stream-gate.js';

/** What every dashboard watching one SKU on this instance receives, once a second. */
export interface DashboardSnapshot {
  /** The instance that served this snapshot (any instance shows the same fleet). */
  instance: string;
  /** When the snapshot was taken, by the shared clock (the one sale windows follow), so a countdown counts to it. */
  at: string;
  sku: string;
  /** The SKU's stock (one SKU view statement), or null with `problem` when it cannot be read. */
  view: SkuView | null;
  problem?: string;
  /** The SKU's waiting line as GET /skus/:sku/line answers it; null for a SKU sold without one (or not read). */
  line: LineView | null;
  /**
   * The fleet's and the SKU's series over the last RECENT_SECONDS whole seconds. Each instance adds its counts once a
   * second, so the newest seconds may still grow: every snapshot sends them again and the page replaces them.
   */
  recent: SeriesWindow | null;
  /** The instances that beat within the last minute, with their readiness. */
  instances: InstanceBeat[];
  /** The SKU's notable events of the last hour (sku.* types), newest first. */
  timeline: StockEvent[];
  /** What the books' audit last found, fleet-wide; null when it cannot be read. */
  books: BooksLine | null;
}

/** The audit's finding in a line: balanced or not, the first SKUs off, and how long ago the last pass ended. */
export interface BooksLine {
  balanced: boolean | null;
  unbalancedCount: number;
  unbalanced: string[];
  checkedSecondsAgo: number | null;
}

/** SKUs off the page names; GET /audit lists them all with what is off. */
const BOOKS_NAMED = 5;

function booksLine(report: AuditReport): BooksLine {
  const ago = report.lastPassAt === null ? null : Math.max(0, Date.parse(report.at) - Date.parse(report.lastPassAt));
  return {
    balanced: report.balanced,
    unbalancedCount: report.unbalancedCount,
    unbalanced: report.unbalanced.slice(0, BOOKS_NAMED).map(({ sku }) => sku),
    checkedSecondsAgo: ago === null ? null : Math.round(ago / 1000),
  };
}

/** What the page loads once: the last hour of the series and the timeline. */
export interface DashboardHistory {
  sku: string;
  series: SeriesWindow;
  timeline: StockEvent[];
}

interface Watched {
  subscribers: Set<StreamOutlet>;
  timer: NodeJS.Timeout;
  last?: string;
  /** The newest second the last snapshot sent: the next one sends every second after it again, however late it is. */
  sentTo?: number;
  ticking: boolean;
}

export interface DashboardSources {
  readView: (sku: string) => Promise<SkuView>;
  /** The SKU's line; rejects for a SKU without one. */
  readLine: (sku: string) => Promise<LineView>;
  /** The fleet's series, this instance's name and the shared clock. */
  series: Pick<FleetSeries, 'read' | 'instances' | 'recordStock' | 'now' | 'instance'>;
  /** Where the SKU's timeline is read (a failed read shows none). */
  db: Db;
  /** The books' audit as GET /audit answers it. */
  readAudit: () => Promise<AuditReport>;
  /** Where each watcher's stream opens, capped per caller and bounded in what it buffers. */
  gate: StreamGate;
  intervalMs?: number;
}

/** Seconds of series each snapshot carries: enough to cover an instance's late flush and a missed snapshot or two. */
const RECENT_SECONDS = 10;
/** The history the page loads: the last hour, as the series keep (RETAIN_SECONDS). */
const HISTORY_SECONDS = 3600;
const TIMELINE_LIMIT = 100;

/**
 * Server-sent events for the dashboard. One timer per watched SKU builds one snapshot a second and writes it to
 * every subscriber, so 20 open browsers cost what one does: per SKU and second, one SKU view statement, one read of its line,
 * one timeline scan, one read of the audit's findings and one Redis pipeline per instance, never a read per browser. The timer stops with the last subscriber.
 */
export class DashboardFeed {
  private readonly watched = new Map<string, Watched>();
  private readonly intervalMs: number;

  constructor(private readonly sources: DashboardSources) {
    this.intervalMs = sources.intervalMs ?? 1000;
  }

  /**
   * Adds a watcher of `sku`. A watcher that leaves snapshots unread past the gate's bound is closed (a page's
   * EventSource opens again, and the next snapshot is whole).
   */
  subscribe(sku: string, req: Request, res: Response): void {
    const outlet = this.sources.gate.open('dashboard', req, res);
    let watched = this.watched.get(sku);
    if (!watched) {
      const timer = setInterval(() => void this.tick(sku), this.intervalMs);
      watched = { subscribers: new Set(), timer, ticking: false };
      this.watched.set(sku, watched);
      void this.tick(sku);
    } else if (watched.last && !outlet.send(watched.last)) {
      return;
    }
    watched.subscribers.add(outlet);
    res.on('close', () => this.unsubscribe(sku, outlet));
  }

  /** Ends every stream, so that shutdown does not wait for browsers to leave. */
  close(): void {
    for (const [sku, watched] of this.watched) {
      for (const outlet of watched.subscribers) outlet.end();
      clearInterval(watched.timer);
      this.watched.delete(sku);
    }
  }

  private unsubscribe(sku: string, outlet: StreamOutlet): void {
    const watched = this.watched.get(sku);
    if (!watched) return;
    watched.subscribers.delete(outlet);
    if (watched.subscribers.size === 0) {
      clearInterval(watched.timer);
      this.watched.delete(sku);
    }
  }

  /** The last hour of the fleet's and the SKU's series, up to the last whole second, and its timeline. */
  async history(sku: string): Promise<DashboardHistory> {
    const now = this.sources.series.now();
    const to = Math.floor(now / 1000) - 1;
    const [series, timeline] = await Promise.all([
      this.sources.series.read(sku, to - HISTORY_SECONDS + 1, to),
      this.timeline(sku, now),
    ]);
    return { sku, series, timeline };
  }

  /** The SKU's notable events of the hour before `now`, newest first; none when they cannot be read. */
  private timeline(sku: string, now: number): Promise<StockEvent[]> {
    return skuTimeline(this.sources.db, sku, new Date(now - HISTORY_SECONDS * 1000), TIMELINE_LIMIT).catch(() => []);
  }

  private async tick(sku: string): Promise<void> {
    const watched = this.watched.get(sku);
    // A slow database must not pile up reads: the next tick is skipped until this one is done.
    if (!watched || watched.ticking) return;
    watched.ticking = true;
    try {
      const snapshot = await this.snapshot(sku, watched.sentTo);
      const data = `data: ${JSON.stringify(snapshot)}\n\n`;
      watched.last = data;
      if (snapshot.recent) watched.sentTo = snapshot.recent.from + snapshot.recent.seconds - 1;
      for (const outlet of watched.subscribers) if (!outlet.send(data)) this.unsubscribe(sku, outlet);
    } catch {
      // Nothing to show this second (the stock read has its own fallback); the next tick tries again.
    } finally {
      watched.ticking = false;
    }
  }

  /**
   * The snapshot of now. Its series start RECENT_SECONDS before the last snapshot's end (`sentTo`) when that is older:
   * after a tick held up by a slow read, the seconds between are sent too, and an open page misses none.
   */
  private async snapshot(sku: string, sentTo: number | undefined): Promise<DashboardSnapshot> {
    const { series } = this.sources;
    const at = series.now();
    const to = Math.floor(at / 1000) - 1;
    const from = Math.max(Math.min(to, sentTo ?? to) - RECENT_SECONDS + 1, to - HISTORY_SECONDS + 1);
    const [view, line, recent, instances, timeline, books] = await Promise.all([
      this.sources.readView(sku).then(
        (value) => ({ value, problem: undefined }),
        (error: unknown) => ({
          value: null,
          problem: error instanceof AppError ? error.code : 'dependency_unavailable',
        }),
      ),
      this.sources.readLine(sku).catch(() => null),
      series.read(sku, from, to).catch(() => null),
      series.instances().catch(() => []),
      this.timeline(sku, at),
      this.sources.readAudit().then(booksLine, () => null),
    ]);
    // The stock just read goes into the series too: a watched SKU's stock is charted every second.
    if (view.value) series.recordStock(sku, view.value);
    return {
      instance: series.instance,
      at: new Date(at).toISOString(),
      sku,
      view: view.value,
      ...(view.problem ? { problem: view.problem } : {}),
      line,
      recent,
      instances,
      timeline,
      books,
    };
  }
}
