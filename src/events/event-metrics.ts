import { Counter, Gauge, type Registry } from 'prom-client';
import type { EventType } from './event-types.js';

/**
 * The events' metrics, in the service's registry: events written, and per webhook endpoint its deliveries and lag.
 * `onSequenced` hears of every event written (the fleet's series count them); `longestLagSeconds` is for the same.
 */
export class EventMetrics {
  private readonly lagByEndpoint = new Map<string, number>();
  private readonly written: Counter<'type'>;
  private readonly deliveries: Counter<'endpoint' | 'outcome'>;
  private readonly failures: Counter<'endpoint'>;
  private readonly lag: Gauge<'endpoint'>;

  constructor(
    registry: Registry,
    private readonly onSequenced: (count: number) => void = () => {},
  ) {
    this.written = new Counter({
      name: 'stock_events_written_total',
      help: 'Events this instance sequenced into the feed, by type.',
      labelNames: ['type'],
      registers: [registry],
    });
    this.deliveries = new Counter({
      name: 'stock_webhook_deliveries_total',
      help: 'Webhook delivery attempts by this instance, by endpoint and outcome (delivered, retrying, failed).',
      labelNames: ['endpoint', 'outcome'],
      registers: [registry],
    });
    this.failures = new Counter({
      name: 'stock_webhook_failures_total',
      help: 'Webhook attempts that failed (non-2xx, timeout, refused), by endpoint, retried or given up.',
      labelNames: ['endpoint'],
      registers: [registry],
    });
    this.lag = new Gauge({
      name: 'stock_webhook_delivery_lag_seconds',
      help: 'Per endpoint, how long ago the event it was last sent (or is retrying) occurred; 0 once caught up.',
      labelNames: ['endpoint'],
      registers: [registry],
    });
  }

  sequenced(type: EventType, count: number): void {
    this.written.inc({ type }, count);
    this.onSequenced(count);
  }

  attempted(endpoint: string, outcome: 'delivered' | 'retrying' | 'failed', occurredAt: string): void {
    this.deliveries.inc({ endpoint, outcome });
    if (outcome !== 'delivered') this.failures.inc({ endpoint });
    const lag = Math.max(0, (Date.now() - Date.parse(occurredAt)) / 1000);
    this.lag.set({ endpoint }, lag);
    this.lagByEndpoint.set(endpoint, lag);
  }

  caughtUp(endpoint: string): void {
    this.lag.set({ endpoint }, 0);
    this.lagByEndpoint.delete(endpoint);
  }

  /** The longest delivery lag of this instance's endpoints, as last measured; 0 when all caught up. */
  longestLagSeconds(): number {
    return Math.max(0, ...this.lagByEndpoint.values());
  }
}
