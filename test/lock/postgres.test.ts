import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.js';
import { migrateToLatest } from '../../src/db/migrator.js';
import { PostgresServer } from '../../src/dev/servers/index.js';
import { PostgresLock } from '../../src/lock/backends/postgres.js';
import { createLogger } from '../../src/logger.js';
import { describeLockContract } from './contract.js';

/** A Postgres of the lock tests' own, migrated like the service's, whose lock table survives a restart. */
async function startLockPostgres(): Promise<PostgresServer> {
  // fsync guards only against a crash of the machine; commits still survive the restarts of Postgres made here.
  const server = await PostgresServer.start({ fsync: false, maxConnections: 200 });
  const db = createDatabase(server.url, 1);
  // The compiled migrations, as a service starting on this database applies them (`npm test` builds first).
  await migrateToLatest(db, createLogger('warn'), path.resolve('dist/migrations')).finally(() => db.destroy());
  return server;
}

describeLockContract('postgres', { ttlMs: 600, ttlLease: true }, async () => {
  const server = await startLockPostgres();
  const admin = new pg.Pool({ connectionString: server.url, max: 2 });
  admin.on('error', () => {});
  return {
    create: (options) => new PostgresLock({ ...options, connectionString: server.url }),
    recipe: {
      module: 'dist/src/lock/backends/postgres.js',
      className: 'PostgresLock',
      options: { connectionString: server.url },
    },
    steal: async (key) => {
      await admin.query(
        'update distributed_locks set owner = null, hold_count = 0, expires_at = null where lock_key = $1',
        [key],
      );
    },
    restartStore: () => server.restart(),
    teardown: async () => {
      await admin.end();
      await server.destroy();
    },
  };
});

describe('postgres lock: the lock table', () => {
  let server: PostgresServer;
  let admin: pg.Pool;
  let lock: PostgresLock;
  beforeAll(async () => {
    server = await startLockPostgres();
    admin = new pg.Pool({ connectionString: server.url, max: 2 });
    // A connection still closing when the server stops reports it to the pool: expected at teardown.
    admin.on('error', () => {});
    lock = new PostgresLock({ connectionString: server.url, ttlMs: 5_000 });
  });
  afterAll(async () => {
    await lock.close();
    await admin.end();
    await server.destroy();
  });

  const row = async (key: string) =>
    (
      await admin.query(
        'select owner, hold_count, fence::text as fence, expires_at > clock_timestamp() as live from distributed_locks where lock_key = $1',
        [key],
      )
    ).rows[0];

  it('counts re-entries in the row and keeps the row, with its token, after release', async () => {
    const key = `pg-row-${Date.now()}`;
    await lock.using(key, async (outer) => {
      await lock.using(key, async () => {
        expect(await row(key)).toMatchObject({ hold_count: 2, fence: String(outer.fence), live: true });
      });
      expect(await row(key)).toMatchObject({ hold_count: 1 });
    });
    expect(await row(key)).toMatchObject({ owner: null, hold_count: 0 });
  });

  it('issues tokens from the database clock, above a larger token an earlier backend left in the row', async () => {
    const key = `pg-clock-${Date.now()}`;
    const lease = (await lock.tryAcquire(key))!;
    const { rows } = await admin.query<{ micros: string }>(
      'select floor(extract(epoch from clock_timestamp()) * 1000000)::bigint::text as micros',
    );
    expect(Math.abs(lease.fence - Number(rows[0]!.micros))).toBeLessThan(5_000_000);
    await lock.release(lease);
    await admin.query('update distributed_locks set fence = $2 where lock_key = $1', [
      key,
      String(lease.fence + 10_000_000),
    ]);
    const next = (await lock.tryAcquire(key))!;
    expect(next.fence).toBe(lease.fence + 10_000_001);
    await lock.release(next);
  });

  it('refuses `fair`, which a lock table cannot queue, with a clear error', async () => {
    await expect(lock.acquire('pg-fair', { fair: true })).rejects.toThrow(/does not support 'fair'/);
  });
});
