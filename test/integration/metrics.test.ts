import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

/** One sample of the Prometheus text, or undefined when the series is absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('GET /metrics', () => {
  let own: OwnDatabase;
  let svc: RunningService;
  beforeAll(async () => {
    // The counters are the instance's, so it must see this file's orders only: on the shared database it would also
    // admit tickets of waiting lines earlier test files left open.
    own = await createOwnDatabase('metrics');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    svc = await startService({ DATABASE_URL: own.url });
  });
  afterAll(async () => {
    await svc?.stop();
    await own?.drop();
  });

  it('counts a real order by outcome, with its lock figures and the SKU’s stock', async () => {
    const sku = uniqueSku('metrics');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 10, segments: 2 })).status).toBe(201);
    const before = (await call(svc.url, 'GET', '/metrics')).body as string;

    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 3 })).status).toBe(201);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 100 })).status).toBe(409);

    const scraped = await call(svc.url, 'GET', '/metrics');
    expect(scraped.status).toBe(200);
    expect(scraped.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = scraped.body as string;
    const grew = (series: string) => (sample(text, series) ?? 0) - (sample(before, series) ?? 0);
    expect(grew('stock_orders_total{outcome="placed"}')).toBe(1);
    expect(grew('stock_orders_total{outcome="out_of_stock"}')).toBe(1);
    expect(grew('stock_lock_attempts_total')).toBeGreaterThanOrEqual(2);
    expect(grew('stock_lock_acquisitions_total')).toBeGreaterThanOrEqual(2);
    expect(grew('stock_lock_hold_seconds_count')).toBeGreaterThanOrEqual(2);
    expect(grew('stock_order_segment_visits_count')).toBe(2);
    expect(grew('stock_lock_wait_seconds_count')).toBe(2);
    expect(sample(text, 'stock_orders_in_progress')).toBe(0);
    expect(sample(text, `stock_sku_available{sku="${sku}"}`)).toBe(7);
    expect(sample(text, 'process_resident_memory_bytes')).toBeGreaterThan(0);
  });

  it("shows a real line's tickets, waiting, admissions and sold-out moment, forming to sold out", async () => {
    const sku = uniqueSku('metrics-line');
    const opensAt = new Date(Date.now() + 3_000).toISOString();
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 2, segments: 2, saleStartsAt: opensAt })).status).toBe(
      201,
    );
    expect((await call(svc.url, 'PUT', `/skus/${sku}/line`, { capacity: 10, holdSeconds: 60 })).status).toBe(200);
    const tickets: string[] = [];
    for (const customerId of ['m1', 'm2', 'm3', 'm4', 'm5']) {
      tickets.push((await call(svc.url, 'POST', `/skus/${sku}/line`, { customerId })).body.ticketId as string);
    }
    const scrape = async () => (await call(svc.url, 'GET', '/metrics')).body as string;
    // A scrape reads the database once a second for all its gauges: the line shows from the next read on.
    let forming = '';
    const shown = async () => sample((forming = await scrape()), `stock_line_tickets{sku="${sku}"}`) !== undefined;
    expect(await waitFor(shown, 5_000)).toBeLessThan(Infinity);
    expect(sample(forming, `stock_line_tickets{sku="${sku}"}`)).toBe(5);
    expect(sample(forming, `stock_line_waiting{sku="${sku}"}`)).toBe(5);
    expect(sample(forming, `stock_line_admissions_total{sku="${sku}"}`)).toBeUndefined();
    expect(sample(forming, `stock_line_sold_out_timestamp_seconds{sku="${sku}"}`)).toBeUndefined();

    // After the opening the first two in the drawn line are admitted; confirming both sells the SKU out.
    const line = async () => (await call(svc.url, 'GET', `/skus/${sku}/line`)).body;
    let admitted: { status: string; reservation: { orderId: string } }[] = [];
    const twoAdmitted = async () => {
      const views = await Promise.all(
        tickets.map(async (id) => (await call(svc.url, 'GET', `/line-tickets/${id}`)).body),
      );
      admitted = views.filter((t) => t.status === 'admitted');
      return admitted.length === 2;
    };
    expect(await waitFor(twoAdmitted, 10_000)).toBeLessThan(Infinity);
    for (const ticket of admitted) {
      expect((await call(svc.url, 'POST', `/orders/${ticket.reservation.orderId}/confirm`)).status).toBe(200);
    }
    expect(await waitFor(async () => (await line()).status === 'sold_out', 10_000)).toBeLessThan(Infinity);
    const { soldOutAt } = await line();

    const soldOut = await scrape();
    expect(sample(soldOut, `stock_line_tickets{sku="${sku}"}`)).toBe(5);
    expect(sample(soldOut, `stock_line_waiting{sku="${sku}"}`)).toBe(3);
    expect(sample(soldOut, `stock_line_admissions_total{sku="${sku}"}`)).toBe(2);
    expect(sample(soldOut, `stock_line_sold_out_timestamp_seconds{sku="${sku}"}`)).toBe(Date.parse(soldOutAt) / 1000);
  });

  it('answers only GET', async () => {
    const answer = await call(svc.url, 'POST', '/metrics', {});
    expect(answer.status).toBe(405);
    expect(answer.headers.get('allow')).toBe('GET');
  });
});

describe('GET /metrics with tokens configured', () => {
  const ADMIN_TOKEN = `adm-${randomBytes(12).toString('hex')}`;
  const METRICS_TOKEN = `met-${randomBytes(12).toString('hex')}`;
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

  it('needs the admin token as a bearer token when only ADMIN_TOKEN is set: 401 without or wrong', async () => {
    const svc = await startService({ ADMIN_TOKEN });
    try {
      const missing = await call(svc.url, 'GET', '/metrics');
      expect(missing.status).toBe(401);
      expect(missing.body.code).toBe('unauthorized');
      expect(missing.headers.get('www-authenticate')).toBe('Bearer');
      expect(JSON.stringify(missing.body)).not.toContain('stock_orders_total');
      const wrong = await call(svc.url, 'GET', '/metrics', undefined, bearer(`${ADMIN_TOKEN}x`));
      expect(wrong.status).toBe(401);
      expect(wrong.body.code).toBe('invalid_token');
      expect(
        (await call(svc.url, 'GET', '/metrics', undefined, { authorization: `Basic ${ADMIN_TOKEN}` })).status,
      ).toBe(401);
      const scraped = await call(svc.url, 'GET', '/metrics', undefined, bearer(ADMIN_TOKEN));
      expect(scraped.status).toBe(200);
      expect(scraped.body).toContain('stock_orders_total');
    } finally {
      await svc.stop();
    }
  });

  it('takes METRICS_TOKEN (or the admin token) for scraping, and METRICS_TOKEN opens no admin route', async () => {
    const svc = await startService({ ADMIN_TOKEN, METRICS_TOKEN });
    try {
      expect((await call(svc.url, 'GET', '/metrics')).status).toBe(401);
      expect((await call(svc.url, 'GET', '/metrics', undefined, bearer('not-the-token-at-all'))).status).toBe(401);
      expect((await call(svc.url, 'GET', '/metrics', undefined, bearer(METRICS_TOKEN))).status).toBe(200);
      expect((await call(svc.url, 'GET', '/metrics', undefined, bearer(ADMIN_TOKEN))).status).toBe(200);
      const sku = uniqueSku('metrics-token');
      const refused = await call(svc.url, 'POST', '/skus', { sku, stock: 1, segments: 1 }, bearer(METRICS_TOKEN));
      expect(refused.status).toBe(403);
      expect(refused.body).toMatchObject({ code: 'forbidden', scope: 'stock:admin' });
      expect((await call(svc.url, 'GET', `/skus/${sku}`)).status).toBe(404);
    } finally {
      await svc.stop();
    }
  });
});
