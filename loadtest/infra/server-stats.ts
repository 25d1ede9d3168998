import { Redis } from 'ioredis';
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';

/** A script call is one round trip, however many commands the script runs inside Redis. */
const SCRIPT_CALLS = new Set(['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'fcall_ro']);
const sum = (values: Iterable<number>) => [...values].reduce((a, b) => a + b, 0);

export type ServerStats = Awaited<ReturnType<typeof openServerStats>>;

/**
 * What an order costs the servers, from their own counters around a round: every client counts, as in production.
 * `redisAddresses`: every node (`host:port` or a URL), each primary and replica of a cluster.
 */
export async function openServerStats(redisAddresses: string[], db: Db) {
  const nodes = redisAddresses.map((address) =>
    new Redis(address.includes('://') ? address : `redis://${address}`, { lazyConnect: true }).on('error', () => {}),
  );
  // Without pg_stat_statements in shared_preload_libraries the view fails to read, and statements are not counted.
  const counting = async () => {
    await sql`create extension if not exists pg_stat_statements`.execute(db);
    await sampleStatements(db);
    return db;
  };
  const counted = await counting().catch(() => null);
  const sample = () => sampleServers(nodes, counted);
  return {
    /** Starts counting; the returned function ends it and divides by the orders the round answered. */
    async start() {
      const before = await sample();
      return async (orders: number) => perOrder(before, await sample(), orders);
    },
    close: () => nodes.forEach((node) => node.disconnect()),
  };
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
    role: /^role:master/m.test(replication!) ? 'primary' : 'replica',
    cpuSeconds: field('used_cpu_user') + field('used_cpu_sys'),
    calls: new Map(calls.map(([, name, n]) => [name!, Number(n)])),
  };
}

async function sampleStatements(db: Db) {
  const { rows } = await sql<{ id: string; calls: number; exec_ms: number }>`
    select s.queryid::text as id, s.calls::bigint as calls, s.total_exec_time as exec_ms
    from pg_stat_statements s join pg_database d on d.oid = s.dbid
    where d.datname = current_database() and s.query not like '%pg_stat_statements%'`.execute(db);
  return new Map(rows.map((r) => [r.id, { calls: Number(r.calls), execMs: r.exec_ms }]));
}

async function sampleServers(nodes: Redis[], db: Db | null) {
  const [redis, postgres] = await Promise.all([Promise.all(nodes.map(sampleRedis)), db && sampleStatements(db)]);
  return { redis, postgres };
}
type Sample = Awaited<ReturnType<typeof sampleServers>>;

function perOrder(before: Sample, after: Sample, orders: number) {
  const per = (n: number) => (orders > 0 ? n / orders : NaN);
  const onPrimaries = new Map<string, number>();
  const nodes = after.redis.map((node, i) => {
    const earlier = before.redis[i]!;
    if (node.role === 'primary')
      for (const [name, n] of node.calls) {
        const ran = n - (earlier.calls.get(name) ?? 0);
        if (ran > 0) onPrimaries.set(name, (onPrimaries.get(name) ?? 0) + ran);
      }
    return { role: node.role, cpuMsPerOrder: per((node.cpuSeconds - earlier.cpuSeconds) * 1000) };
  });
  const statements = [...(after.postgres ?? [])].flatMap(([id, now]) => {
    const then = before.postgres?.get(id);
    const calls = now.calls - (then?.calls ?? 0);
    return calls > 0 ? [{ calls, execMs: now.execMs - (then?.execMs ?? 0) }] : [];
  });
  return {
    redis: {
      /** Every node's CPU; a replica's is its primary's writes, replicated. */
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
    },
  };
}
