import cluster, { type Worker } from 'node:cluster';
import { once } from 'node:events';
import { availableParallelism } from 'node:os';
import { type Extensions, StockService } from './app.js';
import { type Config, loadConfig } from './config.js';
import { ConfigError } from './errors.js';
import { migrateToLatest } from './db/migrator.js';
import { EmbeddedDefaultError, resolveEndpoints } from './endpoints.js';
import { createLogger, type Logger } from './logger.js';
import { redisConfigured } from './redis/connections.js';

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/**
 * The service as a process: config → endpoints (the embedded default only without URLs) → migrate → listen, and a
 * clean stop on SIGTERM or SIGINT. With WORKERS above 1 this process is the cluster's primary: it starts the embedded
 * servers once, forks the workers (each this same program, a full instance on the same port) and on a signal stops
 * every worker before the embedded servers. src/main.ts runs it as is; the load test's entry point adds its
 * extensions (benchmark routes, a business step).
 */
export function runService(extensions?: Extensions): void {
  launch(extensions).catch((error: unknown) => {
    if (error instanceof EmbeddedDefaultError) console.error(error.message);
    else console.error(error);
    process.exit(1);
  });
}

async function launch(extensions: Extensions | undefined): Promise<void> {
  const config = loadConfigOrExit();
  const log = createLogger(config.logLevel);
  // Listening from the first moment: a signal that arrives while the embedded servers start still stops them, once
  // they are up, instead of killing this process and leaving them running without it. A second signal (Ctrl-C
  // reaches this process from the terminal and from npm alike, and a worker from the terminal and its primary)
  // changes nothing.
  const signalled = new Promise<NodeJS.Signals>((resolve) => {
    process.on('SIGTERM', resolve);
    process.on('SIGINT', resolve);
  });
  if (cluster.isWorker) return start(config, log, signalled, extensions);
  const workers = workerCount(config);
  log.info(workers, `workers: ${workers.workers}`);
  if (workers.workers === 1) return start(config, log, signalled, extensions);
  return startWorkers(config, log, signalled, workers.workers);
}

/**
 * WORKERS, or one per core the machine can spare: every core, less one for each of Redis and Postgres the embedded
 * default runs on this machine (at least one worker).
 */
function workerCount(config: Config): { workers: number; cores: number; basis: string } {
  const cores = availableParallelism();
  if (config.workers !== undefined) return { workers: config.workers, cores, basis: 'WORKERS' };
  const embedded = [!redisConfigured(config) && 'Redis', !config.databaseUrl && 'Postgres'].filter(Boolean);
  const basis = embedded.length
    ? `one per core, less one for each embedded server (${embedded.join(', ')})`
    : 'one per core';
  return { workers: Math.max(1, cores - embedded.length), cores, basis };
}

async function start(
  config: Config,
  log: Logger,
  signalled: Promise<NodeJS.Signals>,
  extensions: Extensions | undefined,
): Promise<void> {
  const host = listenHost(config, log);
  const endpoints = await resolveEndpoints(config, log);
  const service = new StockService(config, log, endpoints, extensions);
  if (extensions) log.warn('load-test extensions in use: for benchmarks only, never in production');
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
    log.info({ url: url(host, port) }, 'listening');
  } catch (error) {
    await service.stop().catch(() => {});
    await endpoints.stopEmbedded();
    throw error;
  }
}

/**
 * The primary of `count` workers: it serves nothing itself. The workers reach the embedded servers it started
 * through their URLs; a worker that exits unasked stops the service (exit 1), as a lone instance's crash does, for
 * the supervisor to restart it whole.
 */
async function startWorkers(
  config: Config,
  log: Logger,
  signalled: Promise<NodeJS.Signals>,
  count: number,
): Promise<void> {
  const host = listenHost(config, log);
  const endpoints = await resolveEndpoints(config, log);
  const workers: Worker[] = [];
  let stopping = false;
  const stop = async (exitCode: number) => {
    if (stopping) return;
    stopping = true;
    // Each worker drains and releases its locks on SIGTERM, as a lone instance does; the servers they use go last.
    const live = workers.filter((worker) => !worker.isDead());
    await Promise.all(live.map((worker) => (worker.process.kill('SIGTERM'), once(worker, 'exit'))));
    await endpoints.stopEmbedded();
    log.info('stopped');
    process.exit(exitCode);
  };
  void signalled.then((signal) => {
    log.info({ signal }, 'shutting down: stopping the workers');
    return stop(0);
  });
  cluster.on('exit', (worker, code, signal) => {
    if (stopping) return;
    log.error({ worker: worker.process.pid, code, signal }, 'a worker exited: stopping the service');
    void stop(1);
  });
  for (let i = 0; i < count; i++) workers.push(cluster.fork(endpoints.embeddedEnv));
  const [address] = await Promise.all(workers.map(async (worker) => (await once(worker, 'listening'))[0] as Address));
  const pids = workers.map((worker) => worker.process.pid);
  log.info({ url: url(host, address!.port), workers: pids }, `listening: ${count} workers`);
}

interface Address {
  port: number;
}

const url = (host: string, port: number) => `http://${host.includes(':') ? `[${host}]` : host}:${port}`;

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
