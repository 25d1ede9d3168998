import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../src/dev/free-port.js';
import type { BackingServices } from './backing-services.js';

const programs = {
  service: fileURLToPath(new URL('../bench/bench-main.js', import.meta.url)),
  alternative: fileURLToPath(new URL('../alternative/server.js', import.meta.url)),
  echo: fileURLToPath(new URL('../alternative/echo.js', import.meta.url)),
};
const clusterPrimary = fileURLToPath(new URL('./cluster-primary.js', import.meta.url));
const READY_TIMEOUT_MS = 60_000;
const KEPT_OUTPUT_LINES = 200;

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
  /** Extra environment for the service, e.g. CRITICAL_SECTION_DELAY_MS. */
  env?: Record<string, string>;
  /** More than 1: that many instances behind one port (Node cluster). */
  instances?: number;
  /** Options for node itself, e.g. --cpu-prof (not allowed in NODE_OPTIONS). */
  nodeArgs?: string[];
  /**
   * Which program: the service (default), the alternative a user would write instead (loadtest/alternative), or a
   * bare express JSON echo (the limit of any express order service).
   */
  program?: keyof typeof programs;
}

/**
 * A service this run starts itself: the service with the benchmark routes (`node dist/loadtest/bench/bench-main.js`,
 * or a cluster of them) against the run's Redis and Postgres. Ready once /readyz answers 200.
 */
export class LocalService implements ServiceTarget {
  readonly adminToken = undefined;
  private readonly output: string[] = [];

  private constructor(
    readonly label: string,
    private readonly child: ChildProcess,
    readonly url: string,
    readonly metricsUrl: string,
    private instancePids: number[],
  ) {
    for (const stream of [child.stdout!, child.stderr!]) {
      createInterface({ input: stream }).on('line', (line) => {
        this.output.push(line);
        if (this.output.length > KEPT_OUTPUT_LINES) this.output.shift();
      });
    }
  }

  static async start(backing: BackingServices, options: LocalServiceOptions): Promise<LocalService> {
    const instances = options.instances ?? 1;
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      ...backing.redisEnv,
      DATABASE_URL: backing.databaseUrl,
      ADMIN_TOKEN: '',
      LOG_LEVEL: 'warn',
      ...options.env,
    };
    const url = `http://127.0.0.1:${port}`;
    let child: ChildProcess;
    let metricsUrl = `${url}/metrics`;
    if (instances > 1) {
      const metricsPort = await freePort();
      metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
      child = spawn(process.execPath, [clusterPrimary], {
        env: {
          ...env,
          CLUSTER_WORKERS: String(instances),
          CLUSTER_METRICS_PORT: String(metricsPort),
          CLUSTER_WORKER_NODE_ARGS: JSON.stringify(options.nodeArgs ?? []),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } else {
      const main = programs[options.program ?? 'service'];
      child = spawn(process.execPath, [...(options.nodeArgs ?? []), main], {
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    }
    const service = new LocalService(options.label, child, url, metricsUrl, instances > 1 ? [] : [child.pid!]);
    try {
      if (instances > 1) service.instancePids = await service.clusterWorkers();
      await service.waitUntilReady();
    } catch (error) {
      await service.stop();
      throw error;
    }
    return service;
  }

  pids(): number[] {
    return this.instancePids;
  }

  allPids(): number[] {
    return [...new Set([this.child.pid!, ...this.instancePids])];
  }

  alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** How the process ended, if it did, and its last lines of output: for the error message when a round fails. */
  diagnostics(): string {
    const ended =
      this.child.exitCode !== null || this.child.signalCode !== null
        ? `exited (code ${this.child.exitCode}, signal ${this.child.signalCode})`
        : 'still running';
    return `${this.label}: ${ended}\nlast output:\n${this.output.join('\n')}`;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, 'exit');
    this.child.kill('SIGTERM');
    const forced = setTimeout(() => this.child.kill('SIGKILL'), 20_000);
    await exited;
    clearTimeout(forced);
  }

  private clusterWorkers(): Promise<number[]> {
    return new Promise((resolve, reject) => {
      const lines = createInterface({ input: this.child.stdout! });
      lines.on('line', (line) => {
        if (!line.startsWith('{"ready"')) return;
        resolve((JSON.parse(line) as { workers: number[] }).workers);
        lines.close();
      });
      this.child.once('exit', (code) => reject(this.exitError(code)));
    });
  }

  private async waitUntilReady(): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (this.child.exitCode !== null) throw this.exitError(this.child.exitCode);
      const ready = await fetch(`${this.url}/readyz`).then(
        (response) => response.status === 200,
        () => false,
      );
      if (ready) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`${this.label}: not ready after ${READY_TIMEOUT_MS} ms\n${this.output.join('\n')}`);
  }

  private exitError(code: number | null): Error {
    return new Error(`${this.label}: service exited (code ${code})\n${this.output.join('\n')}`);
  }
}

/** A service someone else runs (`--url`): the run measures it as it is configured. */
export class RemoteService implements ServiceTarget {
  constructor(
    readonly label: string,
    readonly url: string,
    readonly adminToken: string | undefined,
  ) {}

  get metricsUrl(): string {
    return `${this.url}/metrics`;
  }

  pids(): number[] {
    return [];
  }

  allPids(): number[] {
    return [];
  }

  alive(): boolean {
    return true;
  }

  diagnostics(): string {
    return `${this.label}: a service this run does not control (${this.url})`;
  }

  async stop(): Promise<void> {}
}

export interface MemorySample {
  pid: number;
  rssBytes: number;
  /** Peak RSS since the process started. */
  peakRssBytes: number;
}

/** Resident memory of local processes, from /proc (Linux). */
export function readMemory(pids: number[]): MemorySample[] {
  const samples: MemorySample[] = [];
  for (const pid of pids) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
      samples.push({ pid, rssBytes: kib('VmRSS'), peakRssBytes: kib('VmHWM') });
    } catch {
      // The process is gone or /proc is unavailable: no sample.
    }
  }
  return samples;
}
