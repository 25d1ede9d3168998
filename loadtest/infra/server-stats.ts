import { Redis } from 'ioredis';
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';

/** Statements listed per case: the ones an order pays for, most calls first. */
const LISTED_STATEMENTS = 8;
/** A script call is one round trip, however many commands the script runs inside Redis. */
const SCRIPT_CALLS = new Set(['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'fcall_ro']);

type Sample = Awaited<ReturnType<ServerStats['sample']>>;

/**
 * What an order costs the servers, read from the servers themselves before and after a measured round: Redis
 * commands and CPU per node (INFO commandstats, INFO cpu), Postgres statements and their execution time
 * (pg_stat_statements, when loaded: the embedded default). Every client of the servers counts, the service's expiry
 * sweeps and health checks too, as they would in production.
 */
export class ServerStats {
  private constructor(
    private readonly nodes: Redis[],
    private readonly db: Db | null,
  ) {}

  /** `redisAddresses`: every node (`host:port` or a URL), each primary and replica of a cluster. */
  static async open(redisAddresses: string[], db: Db | null): Promise<ServerStats> {
    const nodes = redisAddresses.map((address) => {
      const redis = new Redis(address.includes('://') ? address : `redis://${address}`, { lazyConnect: true });
      redis.on('error', () => {});
      return redis;
    });
    if (!db) return new ServerStats(nodes, null);
    try {
      await sql`create extension if not exists pg_stat_statements`.execute(db);
      await sql`select 1 from pg_stat_statements limit 1`.execute(db);
      return new ServerStats(nodes, db);
    } catch {
      return new ServerStats(nodes, null); // Not loaded (shared_preload_libraries): statements are not counted.
    }
  }

  /** Starts counting; the returned function ends it and divides by the orders the round answered. */
  async start() {
    const before = await this.sample();
    return async (orders: number) => perOrder(before, await this.sample(), orders);
  }

  close(): void {
    for (const node of this.nodes) node.disconnect();
  }

  private async sample() {
    const statements = async (db: Db) => {
      const { rows } = await sql<{ id: string; query: string; calls: number; exec_ms: number }>`
        select s.queryid::text as id, s.query, s.calls::bigint as calls, s.total_exec_time as exec_ms
        from pg_stat_statements s join pg_database d on d.oid = s.dbid
        where d.datname = current_database() and s.query not like '%pg_stat_statements%'`.execute(db);
      return new Map(rows.map((r) => [r.id, { query: r.query, calls: Number(r.calls), execMs: r.exec_ms }]));
    };
    const [redis, postgres] = await Promise.all([
      Promise.all(this.nodes.map(sampleRedis)),
      this.db && statements(this.db),
    ]);
    return { redis, postgres };
  }
}

async function sampleRedis(node: Redis) {
  if (node.status === 'wait') await node.connect();
  const [cpu, commandstats, replication] = await Promise.all(
    ['cpu', 'commandstats', 'replication'].map((s) => node.info(s)),
  );
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(cpu!)?.[1] ?? NaN);
  // The INFO commands this measurement sends itself are left out.
  const calls = [...commandstats!.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)].filter(([, name]) => name !== 'info');
  return {
    address: `${node.options.host}:${node.options.port}`,
    role: /^role:master/m.test(replication!) ? 'primary' : 'replica',
    cpuSeconds: field('used_cpu_user') + field('used_cpu_sys'),
    calls: new Map(calls.map(([, name, n]) => [name!, Number(n)])),
  };
}

function perOrder(before: Sample, after: Sample, orders: number) {
  const per = (n: number) => (orders > 0 ? n / orders : NaN);
  const sum = (values: Iterable<number>) => [...values].reduce((a, b) => a + b, 0);
  const onPrimaries = new Map<string, number>();
  const nodes = after.redis.map((node, i) => {
    const earlier = before.redis[i]!;
    const deltas = [...node.calls]
      .map(([name, n]) => [name, n - (earlier.calls.get(name) ?? 0)] as const)
      .filter(([, d]) => d > 0);
    if (node.role === 'primary')
      for (const [name, d] of deltas) onPrimaries.set(name, (onPrimaries.get(name) ?? 0) + d);
    const cpuMsPerOrder = per((node.cpuSeconds - earlier.cpuSeconds) * 1000);
    return {
      address: node.address,
      role: node.role,
      commandsPerOrder: per(sum(deltas.map(([, d]) => d))),
      cpuMsPerOrder,
    };
  });
  const statements = [...(after.postgres ?? [])].flatMap(([id, now]) => {
    const then = before.postgres?.get(id);
    const calls = now.calls - (then?.calls ?? 0);
    return calls > 0 ? [{ query: now.query, calls, execMs: now.execMs - (then?.execMs ?? 0) }] : [];
  });
  return {
    orders,
    redis: {
      /** Every node: commands it ran (a replica's are its primary's writes, replicated) and its CPU. */
      nodes,
      scriptCallsPerOrder: per(sum([...onPrimaries].filter(([name]) => SCRIPT_CALLS.has(name)).map(([, n]) => n))),
      /** Every command the primaries ran, the scripts' inner commands included. */
      commandsOnPrimariesPerOrder: per(sum(onPrimaries.values())),
      cpuMsPerOrder: sum(nodes.map((node) => node.cpuMsPerOrder)),
      byCommand: Object.fromEntries([...onPrimaries].sort(([, a], [, b]) => b - a).map(([name, n]) => [name, per(n)])),
    },
    postgres: after.postgres && {
      statementsPerOrder: per(sum(statements.map((s) => s.calls))),
      execMsPerOrder: per(sum(statements.map((s) => s.execMs))),
      top: statements
        .sort((a, b) => b.calls - a.calls)
        .slice(0, LISTED_STATEMENTS)
        .map((s) => ({
          query: s.query.replace(/\s+/g, ' ').slice(0, 160),
          perOrder: per(s.calls),
          meanMs: s.execMs / s.calls,
        })),
    },
  };
}
