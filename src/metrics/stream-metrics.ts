import { Counter, Gauge, type Registry } from 'prom-client';

/** The server-sent-event streams a bound applies to (src/http/stream-gate.ts). */
export type StreamKind = 'events' | 'dashboard' | 'tickets';

/** What the stream gate reports: streams opened and ended, callers refused at their cap, readers cut for lagging. */
export interface StreamHooks {
  opened(kind: StreamKind): void;
  ended(kind: StreamKind): void;
  refused(kind: StreamKind): void;
  closedBehind(kind: StreamKind): void;
}

/** The streams' metrics, in the service's registry; each instance counts its own streams. */
export class StreamMetrics {
  readonly hooks: StreamHooks;

  constructor(registry: Registry) {
    const open = new Gauge({
      name: 'stock_streams_open',
      help: 'Server-sent-event streams open on this instance, by stream (events, dashboard, tickets).',
      labelNames: ['stream'] as const,
      registers: [registry],
    });
    const refused = new Counter({
      name: 'stock_stream_refusals_total',
      help: 'Streams refused because their caller already held STREAMS_PER_CALLER open (429 too_many_streams).',
      labelNames: ['stream'] as const,
      registers: [registry],
    });
    const behind = new Counter({
      name: 'stock_stream_lag_closures_total',
      help: 'Streams closed because their reader left more than STREAM_MAX_BUFFERED_BYTES unread.',
      labelNames: ['stream'] as const,
      registers: [registry],
    });
    for (const stream of ['events', 'dashboard', 'tickets'] as const) {
      open.set({ stream }, 0);
      refused.inc({ stream }, 0);
      behind.inc({ stream }, 0);
    }
    this.hooks = {
      opened: (stream) => open.inc({ stream }),
      ended: (stream) => open.dec({ stream }),
      refused: (stream) => refused.inc({ stream }),
      closedBehind: (stream) => behind.inc({ stream }),
    };
  }
}
