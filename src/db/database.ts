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
  // An idle client whose server went away emits 'error'; the pool drops it and the next query reconnects.
  pool.on('error', () => {});
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}
