import { fileURLToPath } from 'node:url';
import { freePort } from '../../src/dev/free-port.js';
import { SpawnedService } from '../../test/support/service-process.js';
import type { BackingServices } from './backing-services.js';

const script = (file: string) => fileURLToPath(new URL(file, import.meta.url));
const programs = {
  service: script('../bench/bench-main.js'),
  alternative: script('../alternative/server.js'),
  echo: script('../alternative/echo.js'),
};

export type ServiceTarget = Awaited<ReturnType<typeof startService>>;

export interface LocalServiceOptions {
  label: string;
  /** Extra environment for the service, e.g. CRITICAL_SECTION_DELAY_MS; its ADMIN_TOKEN is the target's. */
  env?: Record<string, string>;
  /** More than 1: that many instances behind one port (Node cluster, cluster-primary.ts). */
  instances?: number;
  /** The service with the benchmark routes (default), the alternative a user would write instead, or a bare echo. */
  program?: keyof typeof programs;
}

/** A service this run starts, on the run's Redis and Postgres, spawned by the tests' spawner. */
export async function startService(backing: BackingServices, options: LocalServiceOptions) {
  const { label, instances = 1 } = options;
  const env = {
    ...backing.redisEnv,
    DATABASE_URL: backing.databaseUrl,
    ADMIN_TOKEN: '',
    LOG_LEVEL: 'warn',
    // The events round's webhook receiver listens in the load generator, on loopback.
    WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: '1',
    ...options.env,
    ...backing.poolEnv,
  };
  const metricsPort = instances > 1 ? await freePort() : 0;
  const workers = { CLUSTER_WORKERS: String(instances), CLUSTER_METRICS_PORT: String(metricsPort) };
  const spawned =
    instances === 1
      ? await SpawnedService.start(programs[options.program ?? 'service'], env)
      : await SpawnedService.start(script('./cluster-primary.js'), { ...env, ...workers }, { readyLine: /^\{"ready"/ });
  // A cluster primary names its workers on the line that says they all listen.
  const readyLine = spawned.output.find((line) => line.startsWith('{"ready"'));
  const pids = instances === 1 ? [spawned.pid] : (JSON.parse(readyLine!) as { workers: number[] }).workers;
  return {
    label,
    url: spawned.url,
    metricsUrl: instances === 1 ? `${spawned.url}/metrics` : `http://127.0.0.1:${metricsPort}/metrics`,
    adminToken: env.ADMIN_TOKEN || undefined,
    /** The service instances' process ids, and with a cluster's primary (`allPids`). */
    pids,
    allPids: [...new Set([spawned.pid, ...pids])],
    alive: () => spawned.alive(),
    /** How the process ended, if it did, and its last lines of output: for the error message when a round fails. */
    diagnostics: () =>
      `${label}: ${spawned.ended() ?? 'still running'}\nlast output:\n${spawned.output.slice(-200).join('\n')}`,
    stop: async (): Promise<void> => void (await spawned.stop('SIGTERM', 20_000)),
  };
}
