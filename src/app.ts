import { once } from 'node:events';
import { hostname } from 'node:os';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { sql } from 'kysely';
import type { Config } from './config.js';
import { createDatabase, type Db, openOrderPath } from './db/database.js';
import type { Endpoints } from './endpoints.js';
import { readAuditReport } from './audit/audit-report.js';
import { BooksAudit, DEFAULT_AUDIT_BOUNDS } from './audit/books-audit.js';
import { EventMetrics } from './events/event-metrics.js';
import { Outbox } from './events/outbox.js';
import { EventRetention } from './events/retention.js';
import { SaleEdgeAnnouncer } from './events/sale-edges.js';
import { EventSequencer } from './events/sequencer.js';
import { WebhookDelivery } from './events/webhook-delivery.js';
import { DestinationGuard } from './events/webhook-destinations.js';
import { Access } from './http/auth/access.js';
import { DashboardFeed } from './http/dashboard/dashboard-feed.js';
import { capConnectionsPerAddress } from './http/connection-cap.js';
import type { Unreadiness } from './http/routes/health.routes.js';
import { EventStreams } from './http/routes/events.routes.js';
import { StreamGate } from './http/stream-gate.js';
import { TicketStreams } from './http/routes/line.routes.js';
import { buildHttpApp } from './http/http-app.js';
import { Lines } from './lines/lines.js';
import { OrderLifecycle } from './reservations/order-lifecycle.js';
import { OrderPlacement } from './orders/order-placement.js';
import type { WhileHeld } from './orders/batch-steps.js';
import { SegmentLocks } from './inventory/segment-locks.js';
import { SharedClock } from './inventory/shared-clock.js';
import { SkuDirectory } from './inventory/sku-directory.js';
import { StockAdmin } from './stock/stock-admin.js';
import { createLockBackend } from './lock/create-lock.js';
import { ReleaseNotices } from './lock/release-notices.js';
import type { Logger } from './logger.js';
import { FleetSeries } from './metrics/fleet-series.js';
import { LineMetrics } from './metrics/line-metrics.js';
import { StreamMetrics } from './metrics/stream-metrics.js';
import { ServiceMetrics } from './metrics/service-metrics.js';
import { createRedisConnections, type RedisClient, type RedisConnections } from './redis/connections.js';

/**
 * The one extension point, for the load test (loadtest/bench); the product sets neither. `routes`: built from the
 * running service, mounted after the product's own and before the 404 (the benchmark routes). `whileHeld`: a step
 * every batch that takes stock runs while it holds its segments (a simulated business step).
 */
export interface Extensions {
  routes?: (service: StockService) => express.Router;
  whileHeld?: WhileHeld;
}

/** Configuration changes and returned units may wait this many times longer than an order for their segment locks. */
const ADMIN_WAIT_FACTOR = 5;

/**
 * How long a client may take to send a request (docs/operations.md#slow-clients): its headers within 10 s, the whole
 * request, body included, within 15 s, or the connection is answered 408 and closed. The server checks its
 * connections every second, so a trickling client is cut at most a second after its bound. Streams are not cut: an
 * event stream's request is complete once its headers are in.
 */
const CLIENT_TIME_BOUNDS = { headersTimeout: 10_000, requestTimeout: 15_000, connectionsCheckingInterval: 1_000 };

/**
 * The service: its connections, the order flow and the HTTP app around them. `start()` listens (port 0 picks a
 * free port), `stop()` drains in-flight requests, releases held locks and closes the pools.
 */
export class StockService {
  readonly db: Db;
  readonly redis: RedisClient;
  private readonly connections: RedisConnections;
  readonly locks: SegmentLocks;
  readonly metrics: ServiceMetrics;
  private readonly notices: ReleaseNotices;
  private readonly directory: SkuDirectory;
  /** Sale windows open and close by this clock, the same on every instance. */
  readonly clock: SharedClock;
  private readonly lifecycle: OrderLifecycle;
  private readonly lines: Lines;
  private readonly ticketStreams: TicketStreams;
  private readonly dashboard: DashboardFeed;
  private readonly fleetSeries: FleetSeries;
  readonly sequencer: EventSequencer;
  private readonly streams: EventStreams;
  private readonly retention: EventRetention;
  /** Writes the sale windows' edges as events; none when events are off. */
  private readonly saleEdges: SaleEdgeAnnouncer | undefined;
  private readonly deliveries: WebhookDelivery;
  private readonly audit: BooksAudit;
  private readonly destinations: DestinationGuard;
  readonly access: Access;
  private readonly app: express.Express;
  private server: Server | undefined;
  private stopping = false;

  constructor(
    readonly config: Config,
    private readonly log: Logger,
    endpoints: Endpoints,
    private readonly extensions: Extensions = {},
  ) {
    this.db = createDatabase(endpoints.databaseUrl, config.pgPoolSize, config.batchesInFlight);
    this.connections = createRedisConnections(endpoints.redis, (err) =>
      log.warn({ err: err.message }, 'redis connection error'),
    );
    this.redis = this.connections.commands;
    this.notices = new ReleaseNotices(this.connections.subscriber, this.redis);
    this.clock = new SharedClock(this.redis, config.processClockSkewMs);
    this.metrics = new ServiceMetrics({ db: this.db, clock: this.clock, unreadiness: () => this.unreadiness() });
    const backend = createLockBackend(config, {
      redis: this.redis,
      databaseUrl: endpoints.databaseUrl,
      notices: this.notices,
    });
    this.locks = new SegmentLocks(
      backend,
      { ttlMs: config.lockTtlMs, watchdog: config.lockWatchdog },
      this.metrics.segmentLockHooks,
    );
    this.directory = new SkuDirectory(this.db, this.connections);
    const outbox = new Outbox(config.events.enabled);
    const placement = new OrderPlacement(
      this.db,
      this.locks,
      this.directory,
      this.clock,
      {
        lockWaitMs: config.lockWaitMs,
        whileHeld: extensions.whileHeld,
        combineMaxBatch: config.combineMaxBatch,
        batchesInFlight: config.batchesInFlight,
        outbox,
      },
      this.metrics.orderFlowHooks,
    );
    const admin = new StockAdmin(
      this.db,
      this.locks,
      this.directory,
      this.clock,
      config.lockWaitMs * ADMIN_WAIT_FACTOR,
      outbox,
    );
    this.lifecycle = new OrderLifecycle(
      this.db,
      this.locks,
      this.directory,
      config.lockWaitMs * ADMIN_WAIT_FACTOR,
      outbox,
      log,
    );
    const lineMetrics = new LineMetrics(this.metrics.registry, { db: this.db, clock: this.clock });
    this.lines = new Lines(this.db, this.directory, placement, this.clock, log, outbox, lineMetrics.hooks);
    const eventMetrics = new EventMetrics(this.metrics.registry, (n) => this.metrics.fleetTally.events(n));
    this.sequencer = new EventSequencer(this.db, config.events.pollMs, log, (type, n) =>
      eventMetrics.sequenced(type, n),
    );
    const streamGate = new StreamGate(config.streams, new StreamMetrics(this.metrics.registry).hooks, (req, res) =>
      this.access.callerKey(req, res),
    );
    this.streams = new EventStreams(this.db, config.events.pollMs, streamGate);
    this.ticketStreams = new TicketStreams(this.lines, streamGate);
    this.saleEdges = outbox.enabled ? new SaleEdgeAnnouncer(this.db, () => this.clock.now(), log) : undefined;
    this.retention = new EventRetention(this.db, config.events.retentionMs, log);
    this.audit = new BooksAudit(this.db, config.auditIntervalMs, log, {
      ...DEFAULT_AUDIT_BOUNDS,
      sweepShare: config.auditSweepShare,
    });
    this.destinations = new DestinationGuard(config.events.webhookAllowPrivateDestinations);
    this.deliveries = new WebhookDelivery(
      this.db,
      endpoints.databaseUrl,
      {
        pollMs: config.events.pollMs,
        backoffBaseMs: config.events.webhookBackoffBaseMs,
        backoffMaxMs: config.events.webhookBackoffMaxMs,
        retryForMs: config.events.webhookRetryForMs,
        timeoutMs: config.events.webhookTimeoutMs,
      },
      this.destinations,
      eventMetrics,
      log,
    );
    this.fleetSeries = new FleetSeries({
      redis: this.redis,
      now: () => this.clock.now(),
      instance: `${hostname()} pid ${process.pid}`,
      tally: this.metrics.fleetTally,
      ready: async () => (await this.unreadiness()) === null,
      readStock: (sku) => admin.view(sku),
      webhookLagSeconds: () => eventMetrics.longestLagSeconds(),
      log,
    });
    this.dashboard = new DashboardFeed({
      readView: (sku) => admin.view(sku),
      readLine: (sku) => this.lines.line(sku),
      series: this.fleetSeries,
      db: this.db,
      readAudit: () => readAuditReport(this.db),
      gate: streamGate,
    });
    this.access = new Access(config);
    this.app = buildHttpApp({
      config,
      log,
      db: this.db,
      redis: this.redis,
      clock: this.clock,
      access: this.access,
      placement,
      lifecycle: this.lifecycle,
      lines: this.lines,
      ticketStreams: this.ticketStreams,
      admin,
      streams: this.streams,
      destinations: this.destinations,
      metrics: this.metrics,
      dashboard: this.dashboard,
      unreadiness: () => this.unreadiness(),
      stopping: () => this.stopping,
      extraRoutes: extensions.routes && (() => extensions.routes!(this)),
    });
  }

  async start(port = this.config.port, host = this.config.host): Promise<number> {
    await this.connections.connect();
    await openOrderPath(this.db);
    await this.clock.start();
    await this.directory.start();
    this.lifecycle.start();
    this.lines.start();
    this.sequencer.start();
    this.retention.start();
    this.audit.start();
    this.saleEdges?.start();
    this.deliveries.start();
    this.fleetSeries.start();
    this.server = createServer(CLIENT_TIME_BOUNDS, this.app);
    capConnectionsPerAddress(this.server, this.config.maxConnectionsPerAddress);
    this.server.listen(port, host);
    await once(this.server, 'listening');
    // Keep-alive longer than typical proxies' idle timeout, so they close first.
    this.server.keepAliveTimeout = 65_000;
    return (this.server.address() as AddressInfo).port;
  }

  async unreadiness(): Promise<Unreadiness> {
    if (this.stopping) return 'shutting_down';
    const redisOk = this.redis.ping().then(
      () => true,
      () => false,
    );
    const pgOk = sql`select 1`.execute(this.db).then(
      () => true,
      () => false,
    );
    return (await redisOk) && (await pgOk) ? null : 'dependency_unavailable';
  }

  /** Stops accepting, lets in-flight requests finish (up to the grace period), releases locks, closes pools. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    // Event streams never end by themselves: end them, or closing the server waits out the grace period.
    this.dashboard.close();
    this.streams.close();
    this.ticketStreams.close();
    const server = this.server;
    if (server) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const grace = setTimeout(() => server.closeAllConnections(), this.config.shutdownGraceMs);
      await closed;
      clearTimeout(grace);
    }
    await this.lines.stop();
    await this.lifecycle.stop();
    await this.audit.stop();
    await Promise.all([this.sequencer.stop(), this.retention.stop(), this.deliveries.stop(), this.saleEdges?.stop()]);
    await this.fleetSeries.stop();
    this.clock.stop();
    await this.locks.close().catch(() => {});
    this.notices.close();
    await this.connections.close();
    await this.db.destroy();
  }
}
