import { CompiledQuery, Kysely, PostgresDialect, type Transaction } from 'kysely';
import pg from 'pg';
import type { Database } from './schema.js';

// int8 → number: stock, quantities and fencing tokens all stay below Number.MAX_SAFE_INTEGER.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

export type Db = Kysely<Database>;

const poolOf = new WeakMap<Db, pg.Pool>();

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
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  poolOf.set(db, pool);
  return db;
}

/** A statement of the order's hot path, written once with positional parameters. */
export interface PreparedStatement {
  name: string;
  text: string;
}

/**
 * Runs a hot-path statement. On the pool it runs as a named prepared statement, so Postgres parses and plans it once
 * per connection rather than for every order (Kysely sends every query unnamed). Inside a transaction it runs on the
 * transaction's connection, unnamed.
 */
export async function runPrepared<Row>(
  executor: Db | Transaction<Database>,
  statement: PreparedStatement,
  values: unknown[],
): Promise<Row[]> {
  const pool = poolOf.get(executor as Db);
  if (pool) return (await pool.query({ name: statement.name, text: statement.text, values })).rows as Row[];
  return (await executor.executeQuery(CompiledQuery.raw(statement.text, values))).rows as Row[];
}
