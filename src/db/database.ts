import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Database } from './schema.js';

// int8 → number: stock, quantities and fencing tokens all stay below Number.MAX_SAFE_INTEGER.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

export type Db = Kysely<Database>;

export function createDatabase(connectionString: string, poolSize: number): Db {
  const pool = new pg.Pool({
    connectionString,
    max: poolSize,
    connectionTimeoutMillis: 2_000,
    // A dead Postgres must fail requests, not hang them.
    query_timeout: 10_000,
  });
  // A client whose server went away emits 'error': the pool handles it for idle clients, but a client checked out
  // mid-query has no listener, and an unhandled 'error' would kill the process. The query itself fails (503) and the
  // pool discards the broken client on release.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}
