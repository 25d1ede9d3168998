import { promises as fs } from 'node:fs';
import path from 'node:path';
import { FileMigrationProvider, Kysely, Migrator, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Database } from '../../src/db/schema.js';
import { testEndpoints } from './service.js';

/** A database of its own on the test Postgres: nothing else writes to it. */
export interface OwnDatabase {
  db: Kysely<Database>;
  /** Its connection string, for connections of another kind than `db`'s. */
  url: string;
  /** The compiled migrations, to migrate it step by step or to the latest. */
  migrator: Migrator;
  /** Closes its connections and drops it. */
  drop(): Promise<void>;
}

/** Creates an empty database named `<prefix>_<time>` on the test Postgres (not migrated yet). */
export async function createOwnDatabase(prefix: string): Promise<OwnDatabase> {
  const name = `${prefix}_${Date.now().toString(36)}`;
  const admin = new pg.Client({ connectionString: testEndpoints().databaseUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  const url = new URL(testEndpoints().databaseUrl);
  url.pathname = `/${name}`;
  const db = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url.href, max: 2 }) }),
  });
  const migrationFolder = path.resolve('dist/migrations');
  const migrator = new Migrator({ db, provider: new FileMigrationProvider({ fs, path, migrationFolder }) });
  return {
    db,
    url: url.href,
    migrator,
    drop: async () => {
      await db.destroy();
      await admin.query(`drop database if exists ${name}`);
      await admin.end();
    },
  };
}
