import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { createDatabase } from '../src/db/database.js';
import { migrateToLatest } from '../src/db/migrator.js';
import { PostgresServer, RedisServer } from '../src/dev/servers/index.js';
import { createLogger } from '../src/logger.js';
import type {} from './support/service.js';

/**
 * Starts one real Redis and one real Postgres for the whole run (or uses TEST_REDIS_URL / TEST_DATABASE_URL) and
 * migrates the database. Tests isolate themselves by SKU name, not by server. Whatever the tests write to the
 * temporary directory (keys files, server data, browser profiles) goes in one of its own, removed at the end.
 */
export default async function setup(project: TestProject) {
  const scratch = mkdtempSync(path.join(tmpdir(), 'stock-test-'));
  // Started as root, a test's own Postgres runs as its own user, which must read the files it is given there.
  chmodSync(scratch, 0o755);
  const redis = process.env.TEST_REDIS_URL ? undefined : await RedisServer.start();
  let postgres: PostgresServer | undefined;
  const teardown = async () => {
    await redis?.destroy();
    await postgres?.destroy();
    rmSync(scratch, { recursive: true, force: true });
  };
  try {
    // Its data is thrown away: neither fsync nor waiting for the WAL at commit is worth their time.
    postgres = process.env.TEST_DATABASE_URL
      ? undefined
      : await PostgresServer.start({ fsync: false, durableCommits: false, maxConnections: 400 });
    const db = createDatabase(process.env.TEST_DATABASE_URL ?? postgres!.url, 1);
    // The compiled migrations, exactly as the service applies them (`npm test` builds first).
    await migrateToLatest(db, createLogger('warn'), path.resolve('dist/migrations')).finally(() => db.destroy());
  } catch (error) {
    await teardown();
    throw error;
  }
  const redisUrl = process.env.TEST_REDIS_URL ?? redis!.url;
  const databaseUrl = process.env.TEST_DATABASE_URL ?? postgres!.url;

  // The test files run in workers started after this, which take the environment as it is now.
  process.env.TMPDIR = scratch;
  project.provide('redisUrl', redisUrl);
  project.provide('databaseUrl', databaseUrl);
  return teardown;
}
