import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { freePort } from '../free-port.js';
import { stopOrphanedServer } from './leftover-process.js';
import {
  ChildServer,
  LoopbackServer,
  MissingDependencyError,
  type ServerOptions,
  type StopMode,
  serverDir,
} from './server-process.js';

export interface RedisOptions extends ServerOptions {
  /** Where its files go (created if needed) and stay. Unset: a new temporary directory that destroy() removes. */
  dir?: string;
  /**
   * `aof`: append-only file on (fsync every second) and redis-server's default snapshots, so the data survives a
   * restart: the service's embedded default. `none` (the default): nothing written, a restart comes back empty.
   */
  persistence?: 'aof' | 'none';
  /** More redis-server arguments, after ours, so that they win: `--appendfsync always`, `--replicaof …`. */
  extraArgs?: string[];
}

const HOW_TO_GET_REDIS = [
  'redis-server was not found on PATH. Either install it:',
  '  Debian/Ubuntu: sudo apt-get install -y redis-server',
  '  macOS:         brew install redis',
  'or run one and point the service at it:',
  '  docker compose up -d redis && REDIS_URL=redis://127.0.0.1:6379 npm start',
].join('\n');

/** A redis-server from PATH on a free loopback port. */
export class RedisServer extends LoopbackServer {
  private process: ChildServer | undefined;

  private constructor(
    port: number,
    dir: string,
    ownsDir: boolean,
    private readonly options: RedisOptions,
  ) {
    super(port, dir, ownsDir, options.stopMode ?? 'graceful');
  }

  static async start(options: RedisOptions = {}): Promise<RedisServer> {
    if (spawnSync('redis-server', ['--version']).error) throw new MissingDependencyError(HOW_TO_GET_REDIS);
    const { dir, ownsDir } = serverDir(options.dir, 'redis');
    const server = new RedisServer(await freePort(), dir, ownsDir, options);
    try {
      await server.resume();
    } catch (error) {
      await server.abandon();
      throw error;
    }
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async resume(): Promise<void> {
    if (this.process?.running) throw new Error(`redis-server on port ${this.port} is already running`);
    const pidFile = path.join(this.dir, 'redis.pid');
    // One left running on these files by a starter that was killed is stopped first (or refused, when it is not left
    // over but another live instance's).
    await stopOrphanedServer(pidFile, 'redis-server');
    const persistence =
      this.options.persistence === 'aof' ? ['--appendonly', 'yes'] : ['--save', '', '--appendonly', 'no'];
    this.process = await ChildServer.spawn(
      'redis-server',
      'redis-server',
      [
        ...['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir],
        // Logs to stdout, where its readiness is read.
        ...['--pidfile', pidFile, '--logfile', ''],
        ...persistence,
        ...(this.options.extraArgs ?? []),
      ],
      { output: 'Ready to accept connections' },
    );
  }

  protected async halt(mode: StopMode): Promise<void> {
    const child = this.process;
    this.process = undefined;
    // SIGTERM: redis-server writes what it has to disk before it exits; SIGKILL: it dies where it stands.
    await child?.stop(mode === 'graceful' ? 'SIGTERM' : 'SIGKILL');
  }
}
