import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createDatabase } from '../../src/db/database.js';
import { migrateToLatest } from '../../src/db/migrator.js';
import { freePort } from '../../src/dev/free-port.js';
import { type EmbeddedPostgres, loadEmbeddedPostgres } from '../../src/dev/load-embedded-postgres.js';
import { createLogger } from '../../src/logger.js';

/** How a Postgres goes down: `fast` is an orderly restart, `immediate` a crash (recovery from WAL on the next start). */
export type PostgresStopMode = 'fast' | 'immediate';

const stopSignal: Record<PostgresStopMode, NodeJS.Signals> = { fast: 'SIGINT', immediate: 'SIGQUIT' };

/**
 * A real Postgres from the embedded-postgres package, in a directory of its own, whose data survives stop and start:
 * the fault cases and lock tests restart it, and the global setup starts the shared test database with it. Commits
 * are durable against a process crash by default (`synchronous_commit` on); only fsync, which matters for a machine
 * crash, is off for speed.
 */
export class RestartablePostgres {
  private constructor(
    private readonly server: EmbeddedPostgres,
    readonly port: number,
    private readonly dir: string,
  ) {}

  /**
   * `durableCommits: false` (the shared test database) also turns synchronous_commit off: its data is thrown away,
   * so waiting for the WAL would only slow the tests down.
   */
  static async start(
    options: { durableCommits?: boolean; maxConnections?: number } = {},
  ): Promise<RestartablePostgres> {
    const { durableCommits = true, maxConnections = 200 } = options;
    const dir = mkdtempSync(path.join(tmpdir(), 'stock-test-pg-'));
    // Run as root, Postgres runs as the `postgres` user, which must reach the data directory.
    chmodSync(dir, 0o755);
    const port = await freePort();
    const EmbeddedPostgres = await loadEmbeddedPostgres();
    const server = new EmbeddedPostgres({
      databaseDir: path.join(dir, 'data'),
      port,
      user: 'stock',
      password: 'stock',
      persistent: true,
      createPostgresUser: true,
      postgresFlags: [
        ...['-c', 'fsync=off', '-c', `max_connections=${maxConnections}`, '-c', 'listen_addresses=127.0.0.1'],
        ...(durableCommits ? [] : ['-c', 'synchronous_commit=off']),
      ],
      onLog: () => {},
      onError: () => {},
    });
    await server.initialise();
    await server.start();
    await server.createDatabase('stock');
    return new RestartablePostgres(server, port, dir);
  }

  get url(): string {
    return `postgres://stock:stock@127.0.0.1:${this.port}/stock`;
  }

  /** Stops the server and waits until its postmaster is gone. */
  async stop(mode: PostgresStopMode = 'fast'): Promise<void> {
    const pid = this.postmasterPid();
    if (pid === undefined) return;
    process.kill(pid, stopSignal[mode]);
    for (let i = 0; i < 600 && isAlive(pid); i++) await sleep(50);
    if (isAlive(pid)) throw new Error(`postgres ${pid} did not stop within 30 s`);
  }

  async start(): Promise<void> {
    await this.server.start();
  }

  async restart(): Promise<void> {
    await this.stop('fast');
    await this.start();
  }

  /** Applies the service's compiled migrations, as a service starting on this database would. */
  async migrate(): Promise<void> {
    const db = createDatabase(this.url, 1);
    await migrateToLatest(db, createLogger('warn'), path.resolve('dist/migrations')).finally(() => db.destroy());
  }

  async destroy(): Promise<void> {
    await this.stop('immediate').catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }

  private postmasterPid(): number | undefined {
    try {
      const pid = Number(readFileSync(path.join(this.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
      return Number.isInteger(pid) && pid > 0 && isAlive(pid) ? pid : undefined;
    } catch {
      return undefined;
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
