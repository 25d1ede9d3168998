import cluster from 'node:cluster';
import { AggregatorRegistry, Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { AppError } from '../errors.js';
import type { OrderTrace } from '../orders/batch-steps.js';
import type { OrderFlowHooks } from '../orders/order-placement.js';
import { outcomeOf, type PlacedOrder } from '../orders/outcome.js';
import type { SegmentLockHooks } from '../inventory/segment-locks.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import { readAuditFigures } from '../audit/audit-report.js';
import type { Db } from '../db/database.js';
import { ANSWER_TIME_BUCKETS, FleetTally } from './fleet-tally.js';
import { readAvailableBySku, readOutboxBacklog } from './metrics.repository.js';

export interface ServiceMetricsOptions {
  /** Where the gauges every instance shares are read at scrape time: stock per SKU, the audit's findings, the outbox. */
  db: Db;
  /** The clock sale windows follow: its time, its offset from this process's clock, and how far it may be off. */
  clock: Pick<SharedClock, 'now' | 'offsetFromProcessMs' | 'uncertaintyMs'>;
  /** Why this instance is not ready (GET /readyz), or null when it is. */
  unreadiness: () => Promise<string | null>;
}

/** `read`, shared by the callers of the next second (the gauges of one scrape) instead of read again by each. */
export function readOncePerScrape<T>(read: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  return () => {
    if (!last || performance.now() - last.at > 1_000) {
      const value = read();
      const entry = { at: performance.now(), value };
      // A failed read is not kept: the next scrape reads again.
      value.catch(() => last === entry && (last = undefined));
      last = entry;
    }
    return last.value;
  };
}

/**
 * The service's Prometheus metrics, in a registry of its own (several services may share one process in tests).
 * Order-level figures (segments tried, time parked) are gathered per order through the flow's hooks. The same hooks
 * count each order into `fleetTally`, this instance's share of the fleet's per-second series (./fleet-series.ts).
 */
export class ServiceMetrics {
  readonly registry = new Registry();
  readonly fleetTally: FleetTally;

  private readonly orders = new Counter({
    name: 'stock_orders_total',
    help: 'Order requests by outcome: placed, replayed (idempotent repeat) or the error code answered.',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  private readonly orderDuration = new Histogram({
    name: 'stock_order_duration_seconds',
    help: 'Time spent placing an order, from the first lock attempt to the answer, by outcome.',
    labelNames: ['outcome'] as const,
    buckets: ANSWER_TIME_BUCKETS,
    registers: [this.registry],
  });

  private readonly segmentVisits = new Histogram({
    name: 'stock_order_segment_visits',
    help: 'Segment locks an order tried before it was answered (1 = the first segment it picked served it).',
    buckets: [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256],
    registers: [this.registry],
  });

  private readonly lockWait = new Histogram({
    name: 'stock_lock_wait_seconds',
    help: 'Time an order spent parked waiting for a segment lock to be released (0 when it never waited).',
    buckets: [0.0001, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5],
    registers: [this.registry],
  });

  private readonly lockAttempts = new Counter({
    name: 'stock_lock_attempts_total',
    help:
      'Segments orders tried to take without waiting, counting those answered locally without a round trip ' +
      '(held by this instance, or just found held by another).',
    registers: [this.registry],
  });

  private readonly lockBusy = new Counter({
    name: 'stock_lock_busy_total',
    help: 'Attempts by orders that found the segment lock held by someone else (contention).',
    registers: [this.registry],
  });

  private readonly lockWaits = new Counter({
    name: 'stock_lock_waits_total',
    help: 'Times an order parked because every candidate segment was locked.',
    registers: [this.registry],
  });

  private readonly fencedOut = new Counter({
    name: 'stock_fenced_out_total',
    help: 'Writes refused because the lock was lost before the write (the order was retried).',
    registers: [this.registry],
  });

  private readonly lockLost = new Counter({
    name: 'stock_lock_lost_total',
    help: 'Critical sections abandoned before their write because the watchdog could not keep the lease.',
    registers: [this.registry],
  });

  private readonly lockAcquisitions = new Counter({
    name: 'stock_lock_acquisitions_total',
    help: 'Segment locks taken, by orders and configuration changes alike.',
    registers: [this.registry],
  });

  private readonly lockHold = new Histogram({
    name: 'stock_lock_hold_seconds',
    help: 'Time a segment lock was held, from the acquisition answer to the release call.',
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5],
    registers: [this.registry],
  });

  private readonly batchOrders = new Histogram({
    name: 'stock_batch_orders',
    help: 'Orders one batch placed, whatever their SKUs (batches written at about the same time share a statement).',
    buckets: [1, 2, 4, 8, 16, 32, 64],
    registers: [this.registry],
  });

  private readonly segmentReads = new Counter({
    name: 'stock_segment_reads_total',
    help:
      'Segment states an order batch read from Postgres under the lock. The others it already knew: from its own last ' +
      'hold, or from its SKU lookup, with nobody holding the lock since.',
    registers: [this.registry],
  });

  /** Per SKU, since a flood before an opening is one SKU's; the label set is bounded by the SKUs that have windows. */
  private readonly notOnSale = new Counter({
    name: 'stock_not_on_sale_refusals_total',
    help: 'Orders refused because their SKU was outside its sale window (409 not_on_sale), per SKU.',
    labelNames: ['sku'] as const,
    registers: [this.registry],
  });

  /** Orders being placed right now; a load test waits for 0 so that one round's stragglers stay out of the next. */
  private readonly ordersInProgress = new Gauge({
    name: 'stock_orders_in_progress',
    help: 'Order placements started and not yet answered.',
    registers: [this.registry],
  });

  constructor(options: ServiceMetricsOptions) {
    this.fleetTally = new FleetTally(() => options.clock.now());
    new Gauge({
      name: 'stock_sku_available',
      help: 'Units available per SKU (Σ of its segments), read from Postgres at scrape time; newest 1,000 SKUs.',
      labelNames: ['sku'] as const,
      registers: [this.registry],
      // Every instance reads the same database: across cluster workers take one answer, not their sum.
      aggregator: 'first',
      async collect() {
        this.reset();
        for (const { sku, available } of await readAvailableBySku(options.db, 1000)) this.set({ sku }, available);
      },
    });
    const { clock } = options;
    new Gauge({
      name: 'stock_shared_clock_offset_seconds',
      help: "The shared clock (Redis's, which sale windows follow) minus this process's clock, last measured.",
      registers: [this.registry],
      collect() {
        this.set(clock.offsetFromProcessMs / 1000);
      },
    });
    new Gauge({
      name: 'stock_shared_clock_uncertainty_seconds',
      help: 'How far the shared clock as this instance reads it may be off: half the round trip it was measured with.',
      registers: [this.registry],
      collect() {
        this.set(clock.uncertaintyMs / 1000);
      },
    });
    this.fleetGauges(options);
    collectDefaultMetrics({ register: this.registry });
    if (cluster.isWorker) {
      // Lets a cluster primary aggregate the workers' metrics; the constructor installs the worker's answerer.
      AggregatorRegistry.setRegistries(this.registry);
      new AggregatorRegistry();
    }
  }

  /**
   * Gauges read at scrape time from what every instance shares (the audit's findings, the outbox), so each instance
   * answers the same (across cluster workers, one answer), and this instance's readiness.
   */
  private fleetGauges({ db, unreadiness }: ServiceMetricsOptions): void {
    // One read per scrape for the gauges that share it.
    const readAudit = readOncePerScrape(() => readAuditFigures(db));
    const readOutbox = readOncePerScrape(() => readOutboxBacklog(db));
    const shared = (name: string, help: string, read: () => Promise<number>) =>
      new Gauge({
        name,
        help,
        registers: [this.registry],
        aggregator: 'first',
        async collect() {
          this.set(await read());
        },
      });
    const seconds = (at: Date | null) => (at ? at.getTime() / 1000 : 0);
    shared(
      'stock_books_unbalanced_skus',
      'SKUs whose books the audit last found off (GET /audit says what).',
      async () => (await readAudit()).unbalancedSkus,
    );
    shared('stock_books_last_audit_timestamp_seconds', 'When the last audit pass ended (0: never).', async () =>
      seconds((await readAudit()).lastPassAt),
    );
    shared(
      'stock_books_last_full_audit_timestamp_seconds',
      'When the audit last finished a sweep over every SKU (0: never).',
      async () => seconds((await readAudit()).lastFullPassAt),
    );
    shared(
      'stock_event_outbox_backlog',
      'Changes written and not yet sequenced into the event feed (counted up to 100,000).',
      async () => (await readOutbox()).rows,
    );
    shared(
      'stock_event_outbox_oldest_age_seconds',
      'Age of the oldest change not yet sequenced into the event feed (0: none waiting).',
      async () => (await readOutbox()).oldestAgeSeconds,
    );
    new Gauge({
      name: 'stock_ready',
      help: 'Whether this instance is ready (GET /readyz answers 200): 1 or 0.',
      registers: [this.registry],
      async collect() {
        this.set((await unreadiness()) === null ? 1 : 0);
      },
    });
  }

  /** Hooks for the order flow: they feed the counters and the current order's trace. */
  readonly orderFlowHooks: OrderFlowHooks = {
    observeOrder: (place, trace, skus) => this.observeOrder(place, trace, skus),
    onSegmentVisit: () => this.lockAttempts.inc(),
    onLockBusy: () => this.lockBusy.inc(),
    onWait: () => this.lockWaits.inc(),
    onFencedOut: () => this.fencedOut.inc(),
    onBatch: (orders) => this.batchOrders.observe(orders),
    onSegmentsRead: (count) => this.segmentReads.inc(count),
    onLockLost: () => this.lockLost.inc(),
  };

  /** Runs one order placement, recording its outcome, duration, segments tried and time parked. */
  private async observeOrder(
    place: () => Promise<PlacedOrder>,
    trace: OrderTrace,
    skus: readonly string[],
  ): Promise<PlacedOrder> {
    const started = performance.now();
    this.ordersInProgress.inc();
    let outcome: ReturnType<typeof outcomeOf> = 'internal';
    try {
      const placed = await place();
      outcome = outcomeOf({ placed });
      return placed;
    } catch (error) {
      outcome = outcomeOf({ error });
      if (error instanceof AppError && error.code === 'not_on_sale')
        this.notOnSale.inc({ sku: String(error.extensions.sku) });
      throw error;
    } finally {
      this.ordersInProgress.dec();
      const seconds = (performance.now() - started) / 1000;
      this.orders.inc({ outcome });
      this.orderDuration.observe({ outcome }, seconds);
      this.fleetTally.order({ skus, outcome, seconds, waited: trace.waitedMs > 0 });
      // Replays and refusals before any lock (unknown SKU, sold out) tried no segment: they say nothing of locking.
      if (trace.segmentVisits > 0) {
        this.segmentVisits.observe(trace.segmentVisits);
        this.lockWait.observe(trace.waitedMs / 1000);
      }
    }
  }

  /** Hooks for the segment locks: how often they are taken and how long each is held. */
  readonly segmentLockHooks: SegmentLockHooks = {
    onAcquired: () => this.lockAcquisitions.inc(),
    onReleased: (heldMs) => this.lockHold.observe(heldMs / 1000),
  };
}
