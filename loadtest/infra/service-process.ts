import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../src/dev/free-port.js';
import { SpawnedService, type SpawnOptions } from '../../test/support/service-process.js';
import type { BackingServices } from './backing-services.js';

const programs = {
  service: fileURLToPath(new URL('../bench/bench-main.js', import.meta.url)),
  alternative: fileURLToPath(new URL('../alternative/server.js', import.meta.url)),
  echo: fileURLToPath(new URL('../alternative/echo.js', import.meta.url)),
};
const clusterPrimary = fileURLToPath(new URL('./cluster-primary.js', import.meta.url));

/** A service under test: one this run started (`LocalService`), or one someone else runs (`--url`). */
export interface ServiceTarget {
  label: string;
  url: string;
  metricsUrl: string;
  adminToken: string | undefined;
  /** Process ids of the service instances, when they run on this machine. */
  pids(): number[];
  /** Every process of the service: the instances and, for a cluster, its primary. */
  allPids(): number[];
  /** False once a service this run started has exited; a remote one is assumed to live. */
  alive(): boolean;
  diagnostics(): string;
  stop(): Promise<void>;
}

export interface LocalServiceOptions {
  label: string;
  /** Extra environment for the service, e.g. CRITICAL_SECTION_DELAY_MS; its ADMIN_TOKEN is the target's. */
  env?: Record<string, string>;
  /** More than 1: that many instances behind one port (Node cluster). */
  instances?: number;
  /** Options for node itself, e.g. --cpu-prof (not allowed in NODE_OPTIONS). */
  nodeArgs?: SpawnOptions['nodeArgs'];
  /** The service with the benchmark routes (default), the alternative a user would write instead, or a bare echo. */
  program?: keyof typeof programs;
}

/** A service this run starts, on the run's Redis and Postgres, spawned by the tests' spawner. */
export class LocalService implements ServiceTarget {
  private constructor(
    readonly label: string,
    private readonly spawned: SpawnedService,
    readonly metricsUrl: string,
    private readonly instancePids: number[],
    readonly adminToken: string | undefined,
  ) {}

  static async start(backing: BackingServices, options: LocalServiceOptions): Promise<LocalService> {
    const env = {
      ...backing.redisEnv,
      DATABASE_URL: backing.databaseUrl,
      ADMIN_TOKEN: '',
      LOG_LEVEL: 'warn',
      ...options.env,
    };
    const token = env.ADMIN_TOKEN || undefined;
    const instances = options.instances ?? 1;
    if (instances === 1) {
      const child = await SpawnedService.start(programs[options.program ?? 'service'], env, options);
      return new LocalService(options.label, child, `${child.url}/metrics`, [child.pid], token);
    }
    const metricsPort = await freePort();
    const primary = await SpawnedService.start(
      clusterPrimary,
      {
        ...env,
        CLUSTER_WORKERS: String(instances),
        CLUSTER_METRICS_PORT: String(metricsPort),
        CLUSTER_WORKER_NODE_ARGS: JSON.stringify(options.nodeArgs ?? []),
      },
      { readyLine: /^\{"ready"/ },
    );
    const ready = JSON.parse(primary.output.find((line) => line.startsWith('{"ready"'))!) as { workers: number[] };
    return new LocalService(options.label, primary, `http://127.0.0.1:${metricsPort}/metrics`, ready.workers, token);
  }

  get url(): string {
    return this.spawned.url;
  }
  pids(): number[] {
    return this.instancePids;
  }
  allPids(): number[] {
    return [...new Set([this.spawned.pid, ...this.instancePids])];
  }
  alive(): boolean {
    return this.spawned.alive();
  }
  /** How the process ended, if it did, and its last lines of output: for the error message when a round fails. */
  diagnostics(): string {
    const lines = this.spawned.output.slice(-200).join('\n');
    return `${this.label}: ${this.spawned.ended() ?? 'still running'}\nlast output:\n${lines}`;
  }
  async stop(): Promise<void> {
    await this.spawned.stop('SIGTERM', 20_000);
  }
}

/** A service someone else runs (`--url`): the run measures it as it is configured. */
export function remoteService(url: string, adminToken: string | undefined): ServiceTarget {
  return {
    label: 'target',
    url,
    metricsUrl: `${url}/metrics`,
    adminToken,
    pids: () => [],
    allPids: () => [],
    alive: () => true,
    diagnostics: () => `target: a service this run does not control (${url})`,
    stop: async () => {},
  };
}

/** Resident memory of local processes, from /proc (Linux): now, and the peak since each started (VmHWM). */
export function readMemory(pids: number[]): { rssBytes: number; peakRssBytes: number }[] {
  return pids.flatMap((pid) => {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
      return [{ rssBytes: kib('VmRSS'), peakRssBytes: kib('VmHWM') }];
    } catch {
      return []; // The process is gone or /proc is unavailable: no sample.
    }
  });
}
