import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listingStatement, MAX_SKUS_SCANNED } from '../../src/stock/sku-listing.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { explainScans } from '../support/query-plan.js';
import { call, type RunningService, startService } from '../support/service.js';
import { bearer, serviceKey, writeKeysFile } from '../security/credentials.js';

const CATALOGUE = 10_000;
const SEGMENTS = 2;

interface Page {
  skus: { sku: string }[];
  nextCursor: string | null;
}

/**
 * `GET /skus` on a database of its own: a catalogue of 10,000 SKUs loaded in bulk through SQL (`item-…`), and a few
 * made through the API for the filters (`shop-…`).
 */
describe('GET /skus', () => {
  let own: OwnDatabase;
  let svc: RunningService;
  const page = async (query: string): Promise<Page> => {
    const answer = await call(svc.url, 'GET', `/skus?${query}`);
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    return answer.body as Page;
  };
  /** Every SKU of the query, following nextCursor to the end; the pages' sizes too. */
  const all = async (query: string) => {
    const names: string[] = [];
    const sizes: number[] = [];
    let cursor: string | null = null;
    do {
      const got: Page = await page(`${query}${cursor ? `&cursor=${cursor}` : ''}`);
      names.push(...got.skus.map((s) => s.sku));
      sizes.push(got.skus.length);
      cursor = got.nextCursor;
    } while (cursor !== null);
    return { names, sizes };
  };
  const create = async (body: Record<string, unknown>) => {
    const answer = await call(svc.url, 'POST', '/skus', body);
    expect(answer.status, JSON.stringify(answer.body)).toBe(201);
  };

  beforeAll(async () => {
    own = await createOwnDatabase('sku_listing');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    await sql`
      insert into skus (sku, segment_count, total_stock)
      select 'item-' || lpad(g::text, 5, '0'), ${SEGMENTS}::int, 20 from generate_series(1, ${CATALOGUE}::int) g`.execute(
      own.db,
    );
    await sql`
      insert into stock_segments (sku_id, segment, layout_version, available)
      select k.id, s, k.layout_version, 10 from skus k, generate_series(0, ${SEGMENTS - 1}::int) s`.execute(own.db);
    await sql`analyze skus`.execute(own.db);
    svc = await startService({ DATABASE_URL: own.url });
  });
  afterAll(async () => {
    await svc?.stop();
    await own?.drop();
  });

  it('pages through 10,000 SKUs in name order, each once, while SKUs are created before and after the cursor', async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const got: Page = await page(`prefix=item-&limit=100${cursor ? `&cursor=${cursor}` : ''}`);
      seen.push(...got.skus.map((s) => s.sku));
      cursor = got.nextCursor;
      if (++pages === 50) {
        // Half-way (after item-05000): one SKU sorts before the cursor, one after it.
        await create({ sku: 'item-02500a', stock: 1, segments: 1 });
        await create({ sku: 'item-07500a', stock: 1, segments: 1 });
      }
    } while (cursor !== null);
    const expected = Array.from({ length: CATALOGUE }, (_, i) => `item-${String(i + 1).padStart(5, '0')}`);
    expected.splice(7500, 0, 'item-07500a');
    expect(pages).toBe(101);
    expect(seen).toEqual(expected);
  });

  it('costs a page, not the catalogue: a page deep in the list reads limit + 1 SKUs and their segments', async () => {
    const cursor = (await page('prefix=item-08&limit=100')).nextCursor!;
    const query = listingStatement({ limit: 100, cursor }, new Date()).statement.compile(own.db);
    const read = await explainScans(own.db, query);
    expect(read('skus').rowsRead).toBe(101);
    expect(read('stock_segments').rowsRead).toBe(101 * SEGMENTS);
  });

  it('gives each SKU as GET /skus/:sku does, without its segments', async () => {
    const got = await page('prefix=item-0000&limit=3');
    expect(got.skus.map((s) => s.sku)).toEqual(['item-00001', 'item-00002', 'item-00003']);
    for (const listed of got.skus) {
      const { segmentStock, ...view } = (await call(svc.url, 'GET', `/skus/${listed.sku}`)).body;
      expect(segmentStock).toHaveLength(SEGMENTS);
      expect(listed).toEqual(view);
    }
  });

  describe('filters', () => {
    const hourFromNow = () => new Date(Date.now() + 3_600_000).toISOString();
    beforeAll(async () => {
      await create({ sku: 'shop-plain', stock: 10, segments: 2 });
      await create({ sku: 'shop-later', stock: 10, segments: 2, saleStartsAt: hourFromNow() });
      await create({ sku: 'shop-gone', stock: 2, segments: 1, lowStockThreshold: 5 });
      const order = await call(svc.url, 'POST', '/orders', { sku: 'shop-gone', quantity: 2 });
      expect(order.status).toBe(201);
      await create({ sku: 'shop-few', stock: 3, segments: 2, lowStockThreshold: 5 });
      await create({ sku: 'shop-many', stock: 100, segments: 2, lowStockThreshold: 5 });
    });
    const names = async (query: string) => (await all(`prefix=shop-&${query}`)).names;

    it('prefix', async () => {
      expect(await names('')).toEqual(['shop-few', 'shop-gone', 'shop-later', 'shop-many', 'shop-plain']);
      expect((await all('prefix=shop-g')).names).toEqual(['shop-gone']);
      expect((await page('prefix=nothing')).skus).toEqual([]);
    });

    it('on sale now', async () => {
      expect(await names('onSale=true')).toEqual(['shop-few', 'shop-gone', 'shop-many', 'shop-plain']);
      expect(await names('onSale=false')).toEqual(['shop-later']);
      const [later] = (await page('prefix=shop-later')).skus as unknown as { onSale: boolean }[];
      expect(later!.onSale).toBe(false);
    });

    it('sold out', async () => {
      expect(await names('soldOut=true')).toEqual(['shop-gone']);
      expect(await names('soldOut=false')).toEqual(['shop-few', 'shop-later', 'shop-many', 'shop-plain']);
    });

    it('low stock: something left, at or below the threshold', async () => {
      expect(await names('lowStock=true')).toEqual(['shop-few']);
      expect(await names('lowStock=false')).toEqual(['shop-gone', 'shop-later', 'shop-many', 'shop-plain']);
      expect(await names('lowStock=true&onSale=true&soldOut=false')).toEqual(['shop-few']);
    });

    it('looks at a bounded number of SKUs a page: a filter few SKUs pass gives short pages, never a whole scan', async () => {
      const { names: soldOut, sizes } = await all('soldOut=true&limit=100');
      expect(soldOut).toEqual(['shop-gone']);
      // The whole catalogue in pages of at most MAX_SKUS_SCANNED SKUs looked at, most of them empty.
      expect(sizes.length).toBe(Math.ceil((CATALOGUE + 2 + 5) / MAX_SKUS_SCANNED));
    });
  });

  it('refuses what it cannot read with a problem document', async () => {
    for (const query of [
      'cursor=bm90LWEtY3Vyc29y',
      'limit=101',
      'limit=0',
      'onSale=yes',
      'prefix=a%20b',
      'sort=name',
    ]) {
      const answer = await call(svc.url, 'GET', `/skus?${query}`);
      expect(answer.status, query).toBe(400);
      expect(answer.body.code, query).toBe('bad_request');
    }
  });

  it('needs a credential once keys are configured, any key will do', async () => {
    const reader = serviceKey('reader', ['orders:read']);
    const keyed = await startService({ DATABASE_URL: own.url, API_KEYS_FILE: writeKeysFile([reader]) });
    try {
      expect((await call(keyed.url, 'GET', '/skus?limit=1')).status).toBe(401);
      const answer = await call(keyed.url, 'GET', '/skus?limit=1', undefined, bearer(reader.key));
      expect(answer.status).toBe(200);
      expect(answer.body.skus).toHaveLength(1);
    } finally {
      await keyed.stop();
    }
  });
});
