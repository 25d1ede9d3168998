import { Redis } from 'ioredis';
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import type { PerOrderCost, RedisNodeCost } from '../results.js';

/** Statements listed per case: the ones an order pays for, most calls first. */
const LISTED_STATEMENTS = 8;
/** Commands and statements this measurement sends itself, left out of the counts. */
const OWN_COMMANDS = new Set(['info']);
const OWN_STATEMENT = /pg_stat_statements/;
/** A script call is one round trip, however many commands the script runs inside Redis. */
const SCRIPT_CALLS = new Set(['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'fcall_ro']);

/** What a Redis node says about itself, at one moment. */
interface RedisNodeSample {
  address: string;
  role: string;
  /** used_cpu_user + used_cpu_sys: every thread of redis-server, in seconds. */
  cpuSeconds: number;
  /** Calls per command name (INFO commandstats). */
  calls: Map<string, number>;
}

/** Per statement (queryid): calls and execution time so far. */
type PostgresSample = Map<string, { query: string; calls: number; execMs: number }>;

/**
 * What an order costs the servers, read from the servers themselves before and after a measured round: Redis
 * commands and CPU per node (INFO commandstats and INFO cpu), Postgres statements and their execution time
 * (pg_stat_statements). Counted on the servers, so every client of them counts: the service's expiry sweeps and
 * health checks too, as they would in production.
 */
export class ServerStats {
  private constructor(
    private readonly redisNodes: Redis[],
    /** Null when statements cannot be counted. */
    private readonly db: Db | null,
  ) {}

  /**
   * `redisAddresses`: every node to read (`host:port` or a URL): the one Redis, or each primary and replica of a
   * cluster. `db`: the service's Postgres; statements are counted when pg_stat_statements is loaded (the embedded
   * default).
   */
  static async open(redisAddresses: string[], db: Db | null): Promise<ServerStats> {
    const nodes = redisAddresses.map((address) => {
      const url = address.includes('://') ? address : `redis://${address}`;
      const redis = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
      redis.on('error', () => {});
      return redis;
    });
    let statementsAvailable = false;
    if (db) {
      try {
        // The extension's view; the counting itself is on whenever the library is loaded.
        await sql`create extension if not exists pg_stat_statements`.execute(db);
        await sql`select 1 from pg_stat_statements limit 1`.execute(db);
        statementsAvailable = true;
      } catch {
        // Not loaded (shared_preload_libraries) or not installable here: statements are then not counted.
      }
    }
    return new ServerStats(nodes, statementsAvailable ? db : null);
  }

  /** Starts counting; the returned function ends it and divides by the orders the round answered. */
  async start(): Promise<(orders: number) => Promise<PerOrderCost>> {
    const before = await this.sample();
    return async (orders) => perOrder(before, await this.sample(), orders);
  }

  async close(): Promise<void> {
    for (const redis of this.redisNodes) redis.disconnect();
  }

  private async sample(): Promise<{ redis: RedisNodeSample[]; postgres: PostgresSample | null }> {
    const [redis, postgres] = await Promise.all([
      Promise.all(this.redisNodes.map((node) => sampleRedis(node))),
      this.db ? this.samplePostgres(this.db) : null,
    ]);
    return { redis, postgres };
  }

  private async samplePostgres(db: Db): Promise<PostgresSample> {
    const { rows } = await sql<{ id: string; query: string; calls: number; exec_ms: number }>`
      select s.queryid::text as id, s.query, s.calls::bigint as calls, s.total_exec_time as exec_ms
      from pg_stat_statements s join pg_database d on d.oid = s.dbid
      where d.datname = current_database()`.execute(db);
    return new Map(
      rows
        .filter((r) => !OWN_STATEMENT.test(r.query))
        .map((r) => [r.id, { query: r.query, calls: r.calls, execMs: r.exec_ms }]),
    );
  }
}

async function sampleRedis(node: Redis): Promise<RedisNodeSample> {
  if (node.status === 'wait') await node.connect();
  const [cpu, commandstats, replication] = await Promise.all([
    node.info('cpu'),
    node.info('commandstats'),
    node.info('replication'),
  ]);
  const field = (text: string, name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(text)?.[1] ?? NaN);
  const calls = new Map<string, number>();
  for (const match of commandstats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(match[1]!, Number(match[2]));
  return {
    address: `${node.options.host}:${node.options.port}`,
    role: /^role:(\w+)/m.exec(replication)?.[1] === 'master' ? 'primary' : 'replica',
    cpuSeconds: field(cpu, 'used_cpu_user') + field(cpu, 'used_cpu_sys'),
    calls,
  };
}

function perOrder(
  before: { redis: RedisNodeSample[]; postgres: PostgresSample | null },
  after: { redis: RedisNodeSample[]; postgres: PostgresSample | null },
  orders: number,
): PerOrderCost {
  const per = (n: number) => (orders > 0 ? n / orders : NaN);
  const onPrimaries = new Map<string, number>();
  const nodes: RedisNodeCost[] = after.redis.map((node, i) => {
    const earlier = before.redis[i]!;
    let commands = 0;
    for (const [name, calls] of node.calls) {
      const delta = calls - (earlier.calls.get(name) ?? 0);
      if (OWN_COMMANDS.has(name) || delta <= 0) continue;
      commands += delta;
      if (node.role === 'primary') onPrimaries.set(name, (onPrimaries.get(name) ?? 0) + delta);
    }
    return {
      address: node.address,
      role: node.role,
      commandsPerOrder: per(commands),
      cpuMsPerOrder: per((node.cpuSeconds - earlier.cpuSeconds) * 1000),
    };
  });
  const sum = (values: Iterable<number>) => [...values].reduce((a, b) => a + b, 0);
  return {
    orders,
    redis: {
      nodes,
      scriptCallsPerOrder: per(sum([...onPrimaries].filter(([name]) => SCRIPT_CALLS.has(name)).map(([, n]) => n))),
      commandsOnPrimariesPerOrder: per(sum(onPrimaries.values())),
      cpuMsPerOrder: sum(nodes.map((node) => node.cpuMsPerOrder)),
      byCommand: Object.fromEntries(
        [...onPrimaries].sort(([, a], [, b]) => b - a).map(([name, calls]) => [name, per(calls)]),
      ),
    },
    postgres: after.postgres && before.postgres ? statementsPerOrder(before.postgres, after.postgres, per) : null,
  };
}

function statementsPerOrder(
  before: PostgresSample,
  after: PostgresSample,
  per: (n: number) => number,
): PerOrderCost['postgres'] {
  const changed = [...after].flatMap(([id, now]) => {
    const then = before.get(id);
    const calls = now.calls - (then?.calls ?? 0);
    return calls > 0 ? [{ query: now.query, calls, execMs: now.execMs - (then?.execMs ?? 0) }] : [];
  });
  return {
    statementsPerOrder: per(changed.reduce((sum, s) => sum + s.calls, 0)),
    execMsPerOrder: per(changed.reduce((sum, s) => sum + s.execMs, 0)),
    top: changed
      .sort((a, b) => b.calls - a.calls)
      .slice(0, LISTED_STATEMENTS)
      .map((s) => ({
        query: s.query.replace(/\s+/g, ' ').slice(0, 160),
        perOrder: per(s.calls),
        meanMs: s.execMs / s.calls,
      })),
  };
}
