import express from 'express';
import type { Config } from '../config.js';
import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import type { DestinationGuard } from '../events/webhook-destinations.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import type { Logger } from '../logger.js';
import type { ServiceMetrics } from '../metrics/service-metrics.js';
import { OrderService } from '../orders/order.service.js';
import type { OrderPlacement } from '../orders/order-placement.js';
import type { RedisClient } from '../redis/connections.js';
import type { Lines } from '../lines/lines.js';
import type { OrderLifecycle } from '../reservations/order-lifecycle.js';
import { listSkus } from '../stock/sku-listing.js';
import { readMovements } from '../stock/movement-history.js';
import type { StockAdmin } from '../stock/stock-admin.js';
import type { Access } from './auth/access.js';
import type { DashboardFeed } from './dashboard/dashboard-feed.js';
import { dashboardRoutes } from './dashboard/dashboard.routes.js';
import { docsRoutes, openApiRoutes } from './docs/docs.routes.js';
import { errorHandler, sendProblem } from './problem.js';
import { auditRoutes } from './routes/audit.routes.js';
import { EventStreams, eventRoutes } from './routes/events.routes.js';
import { liveness, readiness, type Unreadiness } from './routes/health.routes.js';
import { lineRoutes, type TicketStreams, ticketRoutes } from './routes/line.routes.js';
import { metricsRoutes } from './routes/metrics.routes.js';
import { orderRoutes } from './routes/order.routes.js';
import { skuRoutes } from './routes/sku.routes.js';
import { webhookRoutes } from './routes/webhooks.routes.js';
import { orderRateLimit, securityHeaders } from './security.js';

/** The running service's parts the routes are built from (src/app.ts makes them). */
export interface HttpParts {
  config: Config;
  log: Logger;
  db: Db;
  redis: RedisClient;
  clock: SharedClock;
  access: Access;
  placement: OrderPlacement;
  lifecycle: OrderLifecycle;
  lines: Lines;
  ticketStreams: TicketStreams;
  admin: StockAdmin;
  streams: EventStreams;
  destinations: DestinationGuard;
  metrics: ServiceMetrics;
  dashboard: DashboardFeed;
  unreadiness: () => Promise<Unreadiness>;
  /** True once the service drains: new requests are told to go elsewhere. */
  stopping: () => boolean;
  /** The load test's benchmark routes, mounted after the product's own; the product mounts none. */
  extraRoutes?: () => express.Router;
}

/**
 * The HTTP app, its routes in the order a request meets them: health, the draining guard, the open documents, the
 * credential check, then each route at its own path with the access it needs, the 404 and the one error handler.
 */
export function buildHttpApp(parts: HttpParts): express.Express {
  const { config, log, db } = parts;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  if (config.trustProxyHops > 0) app.set('trust proxy', config.trustProxyHops);
  app.use(securityHeaders());
  // Every router is mounted at its own path, so a request enters only the one that serves it: express hands a
  // request back from a router that had nothing for it only on the next turn of the event loop (setImmediate).
  // Health first: liveness stays 200 while draining, readiness says why not.
  const ready = readiness(() => parts.unreadiness());
  app.get('/healthz', liveness);
  app.get('/readyz', ready);
  app.use((_req, res, next) => {
    if (parts.stopping()) {
      res.set('Connection', 'close');
      sendProblem(res, new AppError('shutting_down', 'this instance is shutting down; retry on another', {}, 1));
      return;
    }
    next();
  });
  // Open whatever is configured: the API document describes how to call the rest.
  app.use('/openapi.json', openApiRoutes());
  app.use('/docs', docsRoutes());
  const access = parts.access;
  const authenticate = access.authenticate();
  if (authenticate) app.use(authenticate);
  // The busiest routes first: every mount a request passes costs it a path match.
  const limitOrders = orderRateLimit(config.rateLimitOrdersPerMinute, parts.redis, log, (req, res) =>
    access.rateLimitKey(req, res),
  );
  const orders = new OrderService(db);
  const orderRouting = orderRoutes(parts.placement, parts.lifecycle, orders, access, {
    maxOrderQuantity: config.maxOrderQuantity,
    limitOrders,
  });
  app.post('/orders', ...orderRouting.place);
  app.use('/orders', orderRouting.router);
  // Before /skus, whose router would otherwise look at every line request first.
  app.use(
    '/skus/:sku/line',
    lineRoutes(parts.lines, access, {
      maxOrderQuantity: config.maxOrderQuantity,
      requireCustomerToken: config.lineJoinsRequireCustomerToken,
      limitOrders,
    }),
  );
  app.use('/line-tickets', ticketRoutes(parts.lines, parts.ticketStreams, access));
  app.use(
    '/skus',
    skuRoutes(
      parts.admin,
      {
        listSkus: (query) => listSkus(db, parts.clock, query),
        readMovements: (sku, query) => readMovements(db, sku, query),
      },
      access,
    ),
  );
  app.use('/events', eventRoutes(db, parts.streams, access.require(['events:read'])));
  app.use('/webhooks', webhookRoutes(db, parts.destinations, access.require(['webhooks:manage'])));
  app.use('/audit', auditRoutes(db, access.require(['stock:admin'])));
  const requireMonitoring = access.require(['metrics:read']);
  app.use('/metrics', metricsRoutes(parts.metrics, requireMonitoring));
  app.use('/dashboard', dashboardRoutes(parts.dashboard, db, requireMonitoring));
  if (parts.extraRoutes) app.use(parts.extraRoutes());
  app.use((req) => {
    throw new AppError('route_not_found', `no route for ${req.method} ${req.path}`);
  });
  app.use(errorHandler(log));
  return app;
}
