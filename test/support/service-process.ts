import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { freePort } from '../../src/dev/free-port.js';
import { waitFor } from './wait-for.js';

const READY_TIMEOUT_MS = 60_000;

export interface SpawnOptions {
  /** Options for node itself, e.g. --cpu-prof (not allowed in NODE_OPTIONS). */
  nodeArgs?: string[];
  /** Also wait for a line of output matching this (e.g. a cluster primary's "every worker listens"). */
  readyLine?: RegExp;
  /** Arguments after the script, given the port chosen for it (for a program that reads no PORT). */
  args?: (port: number) => string[];
}

/**
 * The one service spawner of the tests and the load test: `node <script>` as its own OS process on a free loopback
 * port (PORT), ready once `GET /readyz` answers 200. Every line it prints is kept in `output`. The script is the
 * compiled service (`dist/src/main.js`, as production runs it), the load test's entry point with its benchmark
 * routes, a cluster primary, the alternative and the bare echo the load test compares the service with, or a validating
 * proxy in front of the service (test/security/readme-contract.test.ts).
 */
export class SpawnedService {
  private constructor(
    readonly child: ChildProcess,
    readonly url: string,
    readonly output: string[],
  ) {}

  static async start(
    script: string,
    env: Record<string, string | undefined>,
    options: SpawnOptions = {},
  ): Promise<SpawnedService> {
    const port = await freePort();
    const child = spawn(process.execPath, [...(options.nodeArgs ?? []), script, ...(options.args?.(port) ?? [])], {
      // One process per spawn unless the caller asks for workers: a test's instances are the ones it starts.
      env: { ...process.env, HOST: '127.0.0.1', PORT: String(port), WORKERS: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output: string[] = [];
    for (const stream of [child.stdout!, child.stderr!])
      createInterface({ input: stream }).on('line', (line) => output.push(line));
    const service = new SpawnedService(child, `http://127.0.0.1:${port}`, output);
    const ready = async () =>
      !service.alive() ||
      ((!options.readyLine || output.some((line) => options.readyLine!.test(line))) &&
        (await fetch(`${service.url}/readyz`).then(
          (response) => response.status === 200,
          () => false,
        )));
    const waited = await waitFor(ready, READY_TIMEOUT_MS, 100);
    if (!service.alive() || waited === Infinity) {
      await service.stop('SIGKILL');
      throw new Error(
        `${script}: ${service.ended() ?? `not ready within ${READY_TIMEOUT_MS} ms`}\n${output.join('\n')}`,
      );
    }
    return service;
  }

  get pid(): number {
    return this.child.pid!;
  }

  alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** How the process ended, if it did. */
  ended(): string | undefined {
    return this.alive() ? undefined : `exited (code ${this.child.exitCode}, signal ${this.child.signalCode})`;
  }

  /** Sends `signal` and waits for the exit (SIGKILL after `forceAfterMs`, when given); the exit code. */
  async stop(signal: NodeJS.Signals = 'SIGTERM', forceAfterMs?: number): Promise<number | null> {
    if (!this.alive()) return this.child.exitCode;
    const exited = once(this.child, 'exit');
    this.child.kill(signal);
    const forced = forceAfterMs === undefined ? undefined : setTimeout(() => this.child.kill('SIGKILL'), forceAfterMs);
    const [code] = await exited;
    clearTimeout(forced);
    return code as number | null;
  }
}
