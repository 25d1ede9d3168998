import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SkuDirectory } from '../../src/inventory/sku-directory.js';
import { createRedisConnections, type RedisConnections } from '../../src/redis/connections.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { testEndpoints } from '../support/service.js';

/** The directory's memory stays bounded however many SKUs are ordered: past its bound it starts over. */
describe('SKU directory', () => {
  let own: OwnDatabase;
  let redis: RedisConnections;

  beforeAll(async () => {
    own = await createOwnDatabase('sku_directory');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    await sql`
      insert into skus (sku, segment_count, total_stock)
      select 'sku-' || g, 2, 10 from generate_series(1, 4) g`.execute(own.db);
    await sql`
      insert into stock_segments (sku_id, segment, layout_version, available)
      select k.id, s, k.layout_version, 5 from skus k, generate_series(0, 1) s`.execute(own.db);
    redis = createRedisConnections({ kind: 'standalone', url: testEndpoints().redisUrl });
    await redis.connect();
  });
  afterAll(async () => {
    await redis?.close();
    await own?.drop();
  });

  it('keeps entries up to its bound, then drops them all, marked stale, and keeps what is loaded from then on', async () => {
    const directory = new SkuDirectory(own.db, redis, 3);
    const first = await Promise.all(['sku-1', 'sku-2', 'sku-3'].map((sku) => directory.get(sku)));
    expect(first.map((entry) => entry.loadedAvailable)).toEqual([
      [5, 5],
      [5, 5],
      [5, 5],
    ]);
    // Within the bound, a SKU is read once.
    for (const [i, sku] of ['sku-1', 'sku-2', 'sku-3'].entries()) expect(await directory.get(sku)).toBe(first[i]);

    // A fourth SKU starts the cache over: the first three are read again, as new entries. The dropped ones are marked
    // stale, as they no longer hear change notices: an order still holding one looks its SKU up again.
    const fourth = await directory.get('sku-4');
    expect(first.map((entry) => entry.stale)).toEqual([true, true, true]);
    expect(fourth.stale).toBe(false);
    expect(await directory.get('sku-4')).toBe(fourth);
    const again = await directory.get('sku-1');
    expect(again).not.toBe(first[0]);
    expect(again).toMatchObject({ sku: 'sku-1', id: first[0]!.id, segmentCount: 2 });
    expect(await directory.get('sku-1')).toBe(again);
  });
});
