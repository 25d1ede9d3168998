import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scrapeCounter } from '../support/scrape-metric.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';

/**
 * An order batch reads a segment's row under its lock only when it cannot know it: what its instance saw under its
 * own last hold, or read with the SKU's entry, is still the row's state if nobody held the lock since. Counted by
 * `stock_segment_reads_total`; the write is fenced either way, so a wrong guess could only cost a retry.
 */
describe('segment reads under the lock', () => {
  let a: RunningService;
  let b: RunningService;
  beforeAll(async () => {
    [a, b] = await Promise.all([startService(), startService()]);
  });
  afterAll(async () => {
    await Promise.all([a.stop(), b.stop()]);
  });

  const reads = async (svc: RunningService) => (await scrapeCounter([svc.url], 'stock_segment_reads_total')) ?? 0;
  const order = async (svc: RunningService, sku: string) => {
    const placed = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
    expect(placed.status).toBe(201);
  };

  it('happen only where another instance held the lock since this one last saw the segment', async () => {
    const sku = uniqueSku('reads');
    expect((await call(a.url, 'POST', '/skus', { sku, stock: 10, segments: 1 })).status).toBe(201);
    const [a0, b0] = [await reads(a), await reads(b)];

    // A's first order: the state came with the SKU's entry, and no lock was held since the row was written.
    await order(a, sku);
    await order(a, sku);
    expect(await reads(a)).toBe(a0);
    // B never held it, but its entry was read after A's last write, which the lock names as the token before B's.
    await order(b, sku);
    expect(await reads(b)).toBe(b0);
    // A's memory is from before B's hold: it reads, once.
    await order(a, sku);
    expect(await reads(a)).toBe(a0 + 1);
    await order(a, sku);
    expect(await reads(a)).toBe(a0 + 1);

    const stock = await call(a.url, 'GET', `/skus/${sku}`);
    expect(stock.body.available).toBe(5);
  });
});
