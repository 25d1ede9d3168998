import { inject } from 'vitest';
import { type Extensions, StockService } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/logger.js';
import { redisTopology } from '../../src/redis/connections.js';
import { SpawnedService } from './service-process.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
    databaseUrl: string;
  }
}

export interface RunningService {
  url: string;
  service: StockService;
  stop(): Promise<void>;
}

export function testEndpoints() {
  return { redisUrl: inject('redisUrl'), databaseUrl: inject('databaseUrl') };
}

/** The service in this process on a free port, against the test Redis and Postgres (with the load test's `extensions`, if given). */
export async function startService(env: Record<string, string> = {}, extensions?: Extensions): Promise<RunningService> {
  const endpoints = testEndpoints();
  const config = loadConfig({
    LOG_LEVEL: 'silent',
    REDIS_URL: endpoints.redisUrl,
    DATABASE_URL: endpoints.databaseUrl,
    ...env,
  });
  const service = new StockService(
    config,
    createLogger(config.logLevel),
    {
      redis: redisTopology(config),
      // The test Postgres, unless `env` names a database of the test's own.
      databaseUrl: config.databaseUrl!,
    },
    extensions,
  );
  const port = await service.start(0, '127.0.0.1');
  return { url: `http://127.0.0.1:${port}`, service, stop: () => service.stop() };
}

/**
 * The compiled service as its own OS process (`node dist/src/main.js`), as production runs it; with a business step
 * held in the lock (`CRITICAL_SECTION_DELAY_MS` in `env`), the load test's entry point, which alone adds one.
 */
export type ServiceProcess = SpawnedService;
export const ServiceProcess = {
  /** Against the test Redis and Postgres, at log level info (tests read its lines), with `env` on top. */
  spawn(env: Record<string, string> = {}): Promise<ServiceProcess> {
    const { redisUrl, databaseUrl } = testEndpoints();
    const script = env.CRITICAL_SECTION_DELAY_MS ? 'dist/loadtest/bench/bench-main.js' : 'dist/src/main.js';
    return SpawnedService.start(script, {
      LOG_LEVEL: 'info',
      REDIS_URL: redisUrl,
      DATABASE_URL: databaseUrl,
      ...env,
    });
  },
};

/** JSON over fetch, returning status, headers and parsed body. */
export async function call(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a JSON answer, asserted on by each test
): Promise<{ status: number; headers: Headers; body: any }> {
  const response = await fetch(base + path, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    /* not JSON: keep the text */
  }
  return { status: response.status, headers: response.headers, body: parsed };
}

export const uniqueSku = (label: string) =>
  `${label}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
