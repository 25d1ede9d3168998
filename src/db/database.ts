import { CompiledQuery, Kysely, PostgresDialect, type Transaction } from 'kysely';
import pg from 'pg';
import { createPool, kyselyPool } from './listed-hosts.js';
import type { Database } from './schema.js';

// int8 → number: stock, quantities and fencing tokens all stay below Number.MAX_SAFE_INTEGER.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

export type Db = Kysely<Database>;

/** The order path's pool of each database: the connections its named statements run on (runPrepared). */
const orderPathPoolOf = new WeakMap<Db, pg.Pool>();

/**
 * Two pools on one database. Kysely's serves everything but the hot paths, each query planned for its values. The
 * named statements of the order path, and of a batch of line joins (the same kind: by key, once per batch), get
 * connections of their own (`orderPathPoolSize`: one per batch in flight), where they always run their generic plan,
 * made once per connection. Left to choose, Postgres plans a named statement again, for the values at hand, whenever
 * that looks cheaper than the generic plan. With a one-order batch against tables that have grown, it always does:
 * after half a minute of spread traffic every single-order write was planned anew, at about 0.45 ms of planning for a
 * 0.2 ms statement, and a hold with a business step in it lost a sixth of its rate. The statements are written so that
 * every step is by key, whatever the batch holds, so the generic plan is the right one for every batch. Setting it for
 * the whole database instead would also plan Kysely's queries without their values (ranges, limits), where a plan
 * for the values matters.
 */
export function createDatabase(connectionString: string, poolSize: number, orderPathPoolSize = poolSize): Db {
  // The connection string may list several hosts (a primary and its standbys): listed-hosts.ts finds the one to use.
  const common = {
    connectionTimeoutMillis: 2_000,
    // A dead Postgres must fail requests, not hang them.
    query_timeout: 10_000,
  };
  const pool = createPool(connectionString, { ...common, max: poolSize });
  // A fixed size: once open (openOrderPath), its connections stay open, idle or not.
  const orderPath = createPool(connectionString, {
    ...common,
    max: orderPathPoolSize,
    min: orderPathPoolSize,
    options: '-c plan_cache_mode=force_generic_plan',
  });
  for (const each of [pool, orderPath]) {
    // A client whose server went away emits 'error': the pool handles it for idle clients, but a client checked out
    // mid-query has no listener, and an unhandled 'error' would kill the process. The query itself fails (503) and
    // the pool discards the broken client on release.
    each.on('error', () => {});
    each.on('connect', (client) => client.on('error', () => {}));
  }
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: kyselyPool(pool) }) });
  // Destroying the database ends both pools (Kysely's own only if Kysely ever ran a query).
  const destroy = db.destroy.bind(db);
  db.destroy = async () => void (await Promise.all([destroy(), orderPath.end()]));
  orderPathPoolOf.set(db, orderPath);
  return db;
}

/**
 * Opens every connection of the order path's pool, at start: the first burst of orders then finds them ready, rather
 * than setting up twenty at once per instance, which on a busy machine can outlast the connect timeout. One at a
 * time, for the same reason. Fails the start when Postgres will not give them.
 */
export async function openOrderPath(db: Db): Promise<void> {
  const pool = orderPathPoolOf.get(db)!;
  const clients: pg.PoolClient[] = [];
  try {
    while (clients.length < pool.options.max!) clients.push(await pool.connect());
  } finally {
    for (const client of clients) client.release();
  }
}

/** A statement of the order's hot path, written once with positional parameters. */
export interface PreparedStatement {
  name: string;
  text: string;
}

/**
 * Runs a hot-path statement. Outside a transaction it runs on the order path's pool as a named prepared statement, so
 * Postgres parses and plans it once per connection rather than for every order (Kysely sends every query unnamed).
 * Inside a transaction it runs on the transaction's connection, unnamed. Array parameters go as `arrayLiteral`s.
 */
export async function runPrepared<Row>(
  executor: Db | Transaction<Database>,
  statement: PreparedStatement,
  parameters: unknown[],
): Promise<Row[]> {
  const values = parameters.map((value) => (Array.isArray(value) ? arrayLiteral(value) : value));
  const pool = orderPathPoolOf.get(executor as Db);
  if (pool) return (await pool.query({ name: statement.name, text: statement.text, values })).rows as Row[];
  return (await executor.executeQuery(CompiledQuery.raw(statement.text, values))).rows as Row[];
}

/**
 * A Postgres array literal (`{1,2,NULL}`, `{"a","b\\"c"}`) for a parameter cast to an array type. pg would write the
 * same text, but element by element through its general value preparation and one concatenation per element: on
 * traffic spread over many SKUs that was the largest allocation of a batch of orders. So the work done per order passes
 * its arrays as these: the hot-path statements (`runPrepared` converts every array) and the event sequencer's. Numbers
 * and booleans are written as they are, null as NULL, and every string quoted with `"` and `\` escaped, as Postgres's
 * array input reads them.
 */
export function arrayLiteral(values: readonly unknown[]): string {
  const element = (value: unknown) => {
    if (value === null || value === undefined) return 'NULL';
    if (typeof value === 'string') return `"${value.replace(/["\\]/g, '\\$&')}"`;
    if (typeof value === 'number' || typeof value === 'boolean') return String(value);
    throw new TypeError(`an array parameter holds a ${typeof value}; only strings, numbers, booleans and null`);
  };
  return `{${values.map(element).join(',')}}`;
}
