import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditSku, booksViolations } from '../support/invariants.js';
import { scrapeCounter } from '../support/scrape-metric.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

/**
 * How far from a window's edge an answer may fall, in ms: the service promises its shared clock is off by at most
 * half a Redis round trip (well under 1 ms here) plus drift; the rest is slack for nothing but rounding.
 */
const BOUND_MS = 50;

const iso = (ms: number) => new Date(ms).toISOString();

interface Answer {
  status: number;
  code?: string;
  retryAfter: string | null;
  sentAt: number;
  receivedAt: number;
}

/** One order of one unit; the client's times are this host's clock, the one the test Redis runs on. */
async function order(url: string, sku: string): Promise<Answer> {
  const sentAt = Date.now();
  const answer = await call(url, 'POST', '/orders', { sku, quantity: 1 });
  return {
    status: answer.status,
    code: answer.body?.code,
    retryAfter: answer.headers.get('retry-after'),
    sentAt,
    receivedAt: Date.now(),
  };
}

/** Eight clients ordering one unit each, one request after another, until `until` (this host's clock). */
async function flood(url: string, sku: string, until: number): Promise<Answer[]> {
  const answers: Answer[] = [];
  const client = async () => {
    while (Date.now() < until) answers.push(await order(url, sku));
  };
  await Promise.all(Array.from({ length: 8 }, client));
  return answers;
}

describe('sale windows', () => {
  let svc: RunningService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(() => svc.stop());

  const createSku = async (body: Record<string, unknown>) => {
    const sku = uniqueSku('win');
    const created = await call(svc.url, 'POST', '/skus', { sku, stock: 20, segments: 4, ...body });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    return { sku, view: created.body };
  };

  it('shows the window and whether the SKU is on sale, and PATCH moves it', async () => {
    const opens = Date.now() + 3_600_000;
    const { sku, view } = await createSku({ saleStartsAt: iso(opens), saleEndsAt: iso(opens + 3_600_000) });
    expect(view).toMatchObject({ saleStartsAt: iso(opens), saleEndsAt: iso(opens + 3_600_000), onSale: false });
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ onSale: false });

    // An offset is read as the instant it names.
    const patched = await call(svc.url, 'PATCH', `/skus/${sku}`, { saleStartsAt: '2020-01-01T02:00:00+02:00' });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ saleStartsAt: '2020-01-01T00:00:00.000Z', onSale: true });
    const cleared = await call(svc.url, 'PATCH', `/skus/${sku}`, { saleStartsAt: null, saleEndsAt: null });
    expect(cleared.body).toMatchObject({ saleStartsAt: null, saleEndsAt: null, onSale: true, maxPerCustomer: null });
  });

  it('refuses orders before the opening with when and Retry-After, before any lock or row', async () => {
    const opens = Date.now() + 3_600_000;
    const { sku } = await createSku({ saleStartsAt: iso(opens) });
    const { sku: onSale } = await createSku({});
    const lockAttempts = await scrapeCounter([svc.url], 'stock_lock_attempts_total');

    const refused = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ code: 'not_on_sale', sku, opensAt: iso(opens) });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(3599);
    expect(Number(refused.headers.get('retry-after'))).toBeLessThanOrEqual(3600);
    // A cart with one line not on sale takes nothing from the other.
    const cart = await call(svc.url, 'POST', '/orders', {
      items: [
        { sku: onSale, quantity: 2 },
        { sku, quantity: 1 },
      ],
      holdSeconds: 60,
    });
    expect(cart.status).toBe(409);
    expect(cart.body).toMatchObject({ code: 'not_on_sale', sku });

    expect(await scrapeCounter([svc.url], 'stock_lock_attempts_total')).toBe(lockAttempts);
    const metrics = await (await fetch(`${svc.url}/metrics`)).text();
    expect(metrics).toContain(`stock_not_on_sale_refusals_total{sku="${sku}"} 2`);
    for (const name of [sku, onSale]) {
      const audit = await auditSku(svc.service.db, name);
      expect(audit).toMatchObject({ available: 20, sold: 0, reserved: 0 });
    }
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from stock_deductions d join skus k
      on k.id = d.sku_id where k.sku in (${sku}, ${onSale})`.execute(svc.service.db);
    expect(rows[0]!.n).toBe(0);
  });

  it('opens at the instant set: no sale before it, no refusal after it', async () => {
    const opens = Date.now() + 1_500;
    const { sku } = await createSku({ saleStartsAt: iso(opens) });
    const answers = await flood(svc.url, sku, opens + 500);

    const early = answers.filter((a) => a.status === 201 && a.receivedAt < opens - BOUND_MS);
    const late = answers.filter((a) => a.code === 'not_on_sale' && a.sentAt > opens + BOUND_MS);
    expect(early).toEqual([]);
    expect(late).toEqual([]);
    expect(answers.filter((a) => a.code === 'not_on_sale').length).toBeGreaterThan(0);
    expect(answers.filter((a) => a.status === 201).length).toBeGreaterThan(0);
    for (const a of answers.filter((a) => a.code === 'not_on_sale')) {
      // Whole seconds until the opening, rounded up, as of some instant between sending and receiving.
      expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(Math.ceil((opens - a.receivedAt - BOUND_MS) / 1000));
      expect(Number(a.retryAfter)).toBeLessThanOrEqual(Math.ceil((opens - a.sentAt + BOUND_MS) / 1000));
    }
  });

  it('closes at the instant set: nothing placed after it, reservations made before may still be confirmed', async () => {
    const closes = Date.now() + 1_500;
    const { sku } = await createSku({ stock: 100_000, saleEndsAt: iso(closes) });
    const reservation = await call(svc.url, 'POST', '/orders', { sku, quantity: 2, holdSeconds: 60 });
    expect(reservation.status).toBe(201);
    const answers = await flood(svc.url, sku, closes + 500);

    expect(answers.filter((a) => a.status === 201 && a.sentAt > closes + BOUND_MS)).toEqual([]);
    expect(answers.filter((a) => a.code === 'not_on_sale' && a.receivedAt < closes - BOUND_MS)).toEqual([]);
    const closed = answers.find((a) => a.code === 'not_on_sale');
    expect(closed).toBeDefined();
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from orders o join skus k on k.id = o.sku_id
      where k.sku = ${sku} and o.created_at > ${new Date(closes + BOUND_MS)}`.execute(svc.service.db);
    expect(rows[0]!.n).toBe(0);

    const after = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
    expect(after.body).toMatchObject({ code: 'not_on_sale', sku, closedAt: iso(closes) });
    expect(after.headers.get('retry-after')).toBeNull();
    const confirmed = await call(svc.url, 'POST', `/orders/${reservation.body.orderId}/confirm`);
    expect(confirmed.status).toBe(200);
    expect(confirmed.body.status).toBe('confirmed');
    expect(booksViolations(await auditSku(svc.service.db, sku))).toEqual([]);
  });

  it('restocks and re-segments before, during and after a window', async () => {
    const { sku } = await createSku({ saleStartsAt: iso(Date.now() + 3_600_000) });
    const steps = [
      () => call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 5 }),
      () => call(svc.url, 'PUT', `/skus/${sku}/segments`, { segments: 3 }),
      () => call(svc.url, 'PATCH', `/skus/${sku}`, { saleStartsAt: null }),
      () => call(svc.url, 'POST', '/orders', { sku, quantity: 4 }),
      () => call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 5 }),
      () => call(svc.url, 'PUT', `/skus/${sku}/segments`, { segments: 6 }),
      () => call(svc.url, 'PATCH', `/skus/${sku}`, { saleEndsAt: iso(Date.now() - 1000) }),
      () => call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 5 }),
      () => call(svc.url, 'PUT', `/skus/${sku}/segments`, { segments: 2 }),
    ];
    for (const step of steps) expect((await step()).status).toBeLessThan(300);
    const view = await call(svc.url, 'GET', `/skus/${sku}`);
    expect(view.body).toMatchObject({ stock: 35, available: 31, sold: 4, segments: 2, onSale: false });
    expect(booksViolations(await auditSku(svc.service.db, sku))).toEqual([]);
  });

  it('answers bad windows with 400 and changes nothing', async () => {
    const sku = uniqueSku('win');
    const starts = Date.now() + 3_600_000;
    for (const body of [
      { saleStartsAt: iso(starts), saleEndsAt: iso(starts) },
      { saleStartsAt: iso(starts), saleEndsAt: iso(starts - 1) },
      { saleStartsAt: 'tomorrow at ten' },
      { saleStartsAt: '2026-12-01T10:00:00' }, // no zone: which instant is it?
      { saleEndsAt: 1764583200000 },
    ]) {
      const answer = await call(svc.url, 'POST', '/skus', { sku, stock: 5, segments: 1, ...body });
      expect(answer.status, JSON.stringify(body)).toBe(400);
      expect(answer.body.code).toBe('bad_request');
    }
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).status).toBe(404);

    const { sku: existing, view } = await createSku({ saleStartsAt: iso(starts) });
    for (const body of [{}, { saleEndsAt: iso(starts - 60_000) }, { saleEndsAt: 'never' }, { opensAt: iso(starts) }]) {
      const answer = await call(svc.url, 'PATCH', `/skus/${existing}`, body);
      expect(answer.status, JSON.stringify(body)).toBe(400);
    }
    expect((await call(svc.url, 'GET', `/skus/${existing}`)).body).toEqual(view);
    const unknown = await call(svc.url, 'PATCH', `/skus/${uniqueSku('none')}`, { saleStartsAt: null });
    expect(unknown.status).toBe(404);
    // A cart naming a SKU that does not exist takes nothing from its other lines, whatever their windows.
    const { sku: onSale } = await createSku({});
    const cart = await call(svc.url, 'POST', '/orders', {
      items: [
        { sku: onSale, quantity: 1 },
        { sku: uniqueSku('none'), quantity: 1 },
      ],
    });
    expect(cart.body.code).toBe('sku_not_found');
    expect(await auditSku(svc.service.db, onSale)).toMatchObject({ available: 20, sold: 0 });
  });

  it('announces the opening and the close once each, at their instants, with two instances watching', async () => {
    const other = await startService();
    try {
      const opens = Date.now() + 700;
      const closes = opens + 700;
      const { sku } = await createSku({ saleStartsAt: iso(opens), saleEndsAt: iso(closes) });
      const edges = async () =>
        (await call(svc.url, 'GET', `/events?sku=${sku}&types=sku.sale_opened,sku.sale_closed`)).body.events as {
          type: string;
          occurredAt: string;
          data: { window: { saleStartsAt: string; saleEndsAt: string }; available: number };
        }[];
      expect(await waitFor(async () => (await edges()).length >= 2, 10_000)).toBeLessThan(10_000);
      // Both instances had their chance at each edge by now; still one event each.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const events = await edges();
      expect(events.map((e) => [e.type, Date.parse(e.occurredAt)])).toEqual([
        ['sku.sale_opened', opens],
        ['sku.sale_closed', closes],
      ]);
      expect(events[0]!.data).toMatchObject({ available: 20 });
      expect(Date.parse(events[0]!.data.window.saleStartsAt)).toBe(opens);
    } finally {
      await other.stop();
    }
  });

  it('a window changed on one instance holds on another within a second', async () => {
    const other = await startService();
    try {
      const { sku } = await createSku({ stock: 1000 });
      // The other instance has the SKU in its directory, on sale.
      expect((await order(other.url, sku)).status).toBe(201);
      const closed = await call(svc.url, 'PATCH', `/skus/${sku}`, { saleEndsAt: iso(Date.now()) });
      expect(closed.status).toBe(200);
      const tookMs = await waitFor(async () => (await order(other.url, sku)).code === 'not_on_sale', 5_000, 10);
      expect(tookMs).toBeLessThan(1_000);
    } finally {
      await other.stop();
    }
  });
});
