import type { Redis } from 'ioredis';
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import { redisKeys } from '../../src/lock/keys.js';
import { scanKeys } from './fault-books.js';

const TABLES = ['skus', 'stock_segments', 'stock_additions', 'orders', 'stock_deductions'] as const;

/** A digest of every row of every table the service writes: equal digests, nothing changed. */
export async function databaseFingerprint(db: Db): Promise<Record<string, string>> {
  const digests: Record<string, string> = {};
  for (const table of TABLES) {
    const { rows } = await sql<{ digest: string; count: number }>`
      select md5(coalesce(string_agg(t::text, '|' order by t::text), '')) as digest, count(*)::int as count
        from ${sql.table(table)} t`.execute(db);
    digests[table] = `${rows[0]!.count}:${rows[0]!.digest}`;
  }
  return digests;
}

/**
 * Every Redis key with its value (strings) or type (others), but the fleet's series: they count every answer, refusals
 * too, and beat every second, by design; they are monitoring, not the service's state.
 */
export async function redisFingerprint(redis: Redis): Promise<Map<string, string>> {
  const keys = await scanKeys(redis, '*');
  const result = new Map<string, string>();
  for (const key of keys) {
    if (key.startsWith(redisKeys.fleetPrefix)) continue;
    const type = await redis.type(key);
    if (type === 'none') continue;
    result.set(key, type === 'string' ? `string:${await redis.get(key)}` : type);
  }
  return result;
}

/**
 * What a run did to Redis: keys that appeared or whose value changed. Keys that disappeared are left out, because
 * locks of earlier tests expire by themselves.
 */
export function redisChanges(before: Map<string, string>, after: Map<string, string>): string[] {
  const changes: string[] = [];
  for (const [key, value] of after) {
    if (!before.has(key)) changes.push(`added ${key}`);
    else if (before.get(key) !== value) changes.push(`changed ${key}`);
  }
  return changes;
}
