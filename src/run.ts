import { type ExtraRoutes, StockService } from './app.js';
import { type Config, loadConfig } from './config.js';
import { ConfigError } from './errors.js';
import { migrateToLatest } from './db/migrator.js';
import { EmbeddedDefaultError, resolveEndpoints } from './endpoints.js';
import { createLogger, type Logger } from './logger.js';

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/**
 * The service as a process: config → endpoints (the embedded default only without URLs) → migrate → listen, and a
 * clean stop on SIGTERM or SIGINT. src/main.ts runs it as is; the load test's entry point adds its benchmark routes.
 */
export function runService(extraRoutes?: ExtraRoutes): void {
  start(extraRoutes).catch((error: unknown) => {
    if (error instanceof EmbeddedDefaultError) console.error(error.message);
    else console.error(error);
    process.exit(1);
  });
}

async function start(extraRoutes: ExtraRoutes | undefined): Promise<void> {
  const config = loadConfigOrExit();
  const log = createLogger(config.logLevel);
  const host = listenHost(config, log);
  // Listening from the first moment: a signal that arrives while the embedded servers start still stops them, once
  // they are up, instead of killing this process and leaving them running without it. A second signal (Ctrl-C
  // reaches this process from the terminal and from npm alike) changes nothing.
  const signalled = new Promise<NodeJS.Signals>((resolve) => {
    process.on('SIGTERM', resolve);
    process.on('SIGINT', resolve);
  });
  const endpoints = await resolveEndpoints(config, log);
  const service = new StockService(config, log, endpoints, extraRoutes);
  if (extraRoutes) log.warn('extra routes mounted: for benchmarks only, never in production');
  const started = (async () => {
    await migrateToLatest(service.db, log);
    return service.start(config.port, host);
  })();
  void signalled.then(async (signal) => {
    await started.catch(() => {});
    log.info({ signal }, 'shutting down: draining in-flight requests');
    await service.stop();
    await endpoints.stopEmbedded();
    log.info('stopped');
    process.exit(0);
  });

  try {
    const port = await started;
    log.info({ url: `http://${host.includes(':') ? `[${host}]` : host}:${port}` }, 'listening');
  } catch (error) {
    await service.stop().catch(() => {});
    await endpoints.stopEmbedded();
    throw error;
  }
}

function loadConfigOrExit(): Config {
  try {
    return loadConfig();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    console.error(`configuration error: ${error.message}`);
    process.exit(1);
  }
}

/**
 * Without ADMIN_TOKEN, API_KEYS_FILE or a customer issuer the admin routes are open, so the service must not be
 * reachable from other hosts.
 */
function listenHost(config: Config, log: Logger): string {
  if (config.adminToken || config.apiKeys || config.customerTokens) return config.host;
  const missing = 'none of ADMIN_TOKEN, API_KEYS_FILE and CUSTOMER_JWKS_URL / CUSTOMER_JWT_SECRET is set';
  if (!LOOPBACK.has(config.host)) {
    log.warn({ requestedHost: config.host }, `${missing}: listening on 127.0.0.1 only`);
    return '127.0.0.1';
  }
  log.warn(`${missing}: admin routes are open to local callers`);
  return config.host;
}
