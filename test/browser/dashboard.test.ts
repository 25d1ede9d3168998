import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import type { Browser, Page } from 'puppeteer-core';
import { launchChromium } from '../support/chromium.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, ServiceProcess, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

const ADMIN_TOKEN = `dash-${randomBytes(12).toString('hex')}`;
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

/** The text of `selector` once it equals `expected`, within 10 s (the page updates once a second). */
async function waitForText(page: Page, selector: string, expected: string): Promise<void> {
  await page.waitForFunction(
    (sel, want) => document.querySelector(sel)?.textContent === want,
    { timeout: 10_000, polling: 100 },
    selector,
    expected,
  );
}

describe('the dashboard in a real browser', () => {
  let service: ServiceProcess;
  let browser: Browser;
  beforeAll(async () => {
    service = await ServiceProcess.spawn({ ADMIN_TOKEN });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await service?.stop();
  });

  it('follows a SKU live: stock, available, sold, a bar per segment, answers by reason, its timeline, the instance', async () => {
    const sku = uniqueSku('dash');
    expect((await call(service.url, 'POST', '/skus', { sku, stock: 100, segments: 4 }, admin)).status).toBe(201);
    const page = await browser.newPage();
    await page.setViewport({ width: 1000, height: 720 });
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(String(error)));
    page.on('console', (message) => {
      if (message.type() === 'error') pageErrors.push(message.text());
    });
    await page.goto(`${service.url}/dashboard?sku=${sku}#token=${ADMIN_TOKEN}`);

    await waitForText(page, '#available', '100');
    await waitForText(page, '#sold', '0');
    expect(await page.$eval('#stock', (el) => el.textContent)).toBe('100');
    expect(await page.$$eval('#segments .segment', (rows) => rows.length)).toBe(4);
    // Sold without a waiting line: the line's figures are not shown.
    expect(await page.$eval('#line', (el) => (el as HTMLElement).hidden)).toBe(true);
    expect(await page.$eval('#instance', (el) => el.textContent)).toContain(`pid ${service.pid}`);
    // The token left the address bar (and the history) at once.
    expect(page.url()).not.toContain(ADMIN_TOKEN);

    for (let i = 0; i < 7; i++) {
      expect((await call(service.url, 'POST', '/orders', { sku, quantity: 3 })).status).toBe(201);
    }
    await waitForText(page, '#available', '79');
    await waitForText(page, '#sold', '21');
    const segmentValues = await page.$$eval('#segments .segment .value', (cells) =>
      cells.map((cell) => Number(cell.textContent)),
    );
    expect(segmentValues.reduce((sum, n) => sum + n, 0)).toBe(79);
    // Orders by reason, last hour, whole fleet (here one instance), from the series in Redis.
    await page.waitForFunction(
      () => document.querySelector('#refusals tr[data-reason="placed"]')?.getAttribute('data-total') === '7',
      { timeout: 10_000, polling: 100 },
    );

    // The timeline holds the SKU's notable events alone: its creation, not its orders.
    const events = await page.$$eval('#events tbody tr', (rows) =>
      rows.map((row) => [...row.cells].map((cell) => cell.textContent)),
    );
    expect(events.map((cells) => [cells[1], cells[2], cells[3]])).toEqual([['1', 'sku.created', '100']]);

    // An order refused as out of stock shows under its reason.
    expect((await call(service.url, 'POST', '/orders', { sku, quantity: 500 })).status).toBe(409);
    await page.waitForFunction(
      () => document.querySelector('#refusals tr[data-reason="out_of_stock"]')?.getAttribute('data-total') === '1',
      { timeout: 10_000, polling: 100 },
    );

    // A reservation shows as reserved until it is confirmed, cancelled or lapses.
    const held = await call(service.url, 'POST', '/orders', { sku, quantity: 4, holdSeconds: 600 });
    expect(held.status).toBe(201);
    await waitForText(page, '#reserved', '4');

    if (process.env.DASHBOARD_SCREENSHOT) await page.screenshot({ path: process.env.DASHBOARD_SCREENSHOT });
    expect(pageErrors).toEqual([]);

    // A reload keeps the token for this tab (sessionStorage), without the fragment.
    await page.goto(`${service.url}/dashboard?sku=${sku}`);
    await waitForText(page, '#sold', '21');
    await waitForText(page, '#reserved', '4');
    await page.close();
  });

  it("shows a SKU's sale window with a countdown to its opening, then that it is on sale", async () => {
    const sku = uniqueSku('dash');
    // Far enough ahead that a slow page load still sees the countdown.
    const opensAt = Date.now() + 8_000;
    const created = await call(
      service.url,
      'POST',
      '/skus',
      { sku, stock: 10, segments: 1, saleStartsAt: new Date(opensAt).toISOString() },
      admin,
    );
    expect(created.status).toBe(201);
    const page = await browser.newPage();
    try {
      await page.goto(`${service.url}/dashboard?sku=${sku}#token=${ADMIN_TOKEN}`);
      await page.waitForFunction(
        () => /^opens .*, in 0:0[1-8]$/.test(document.querySelector('#sale-window')?.textContent ?? ''),
        { timeout: 10_000, polling: 100 },
      );
      const seconds = () =>
        page.$eval('#sale-window', (el) => Number(/in 0:(\d\d)$/.exec(el.textContent ?? '')?.[1] ?? NaN));
      const first = await seconds();
      // It counts down between the snapshots, by the service's clock.
      await page.waitForFunction(
        (from) => Number(/in 0:(\d\d)$/.exec(document.querySelector('#sale-window')?.textContent ?? '')?.[1]) < from,
        { timeout: 5_000, polling: 100 },
        first,
      );
      expect(await page.$eval('#sale-window', (el) => el.getAttribute('data-on-sale'))).toBe('false');
      const since = `on sale since ${await page.evaluate((ms) => new Date(ms).toLocaleString(), opensAt)}`;
      await page.waitForFunction(
        (want) => document.querySelector('#sale-window')?.textContent === want,
        {
          timeout: 20_000,
          polling: 100,
        },
        since,
      );
      expect(await page.$eval('#sale-window', (el) => el.getAttribute('data-on-sale'))).toBe('true');
    } finally {
      await page.close();
    }
  });

  it("shows a SKU's waiting line: open, its tickets and who was let through, then the moment it sold out", async () => {
    const sku = uniqueSku('dash-line');
    expect((await call(service.url, 'POST', '/skus', { sku, stock: 1, segments: 1 }, admin)).status).toBe(201);
    const settings = { capacity: 10, holdSeconds: 60 };
    expect((await call(service.url, 'PUT', `/skus/${sku}/line`, settings, admin)).status).toBe(200);
    const tickets: string[] = [];
    for (const customerId of ['d1', 'd2', 'd3']) {
      tickets.push((await call(service.url, 'POST', `/skus/${sku}/line`, { customerId })).body.ticketId as string);
    }
    const page = await browser.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(String(error)));
    try {
      await page.goto(`${service.url}/dashboard?sku=${sku}#token=${ADMIN_TOKEN}`);
      await waitForText(page, '#line-state', 'open');
      await waitForText(page, '#line-tickets', '3');
      // The first ticket holds the one unit; the other two wait behind it.
      await waitForText(page, '#line-admitted', '1');
      await waitForText(page, '#line-waiting', '2');
      expect(await page.$eval('#line-sold-out', (el) => el.textContent)).toBe('–');

      let orderId: string | undefined;
      const admitted = async () => {
        const first = (await call(service.url, 'GET', `/line-tickets/${tickets[0]}`)).body;
        orderId = first.reservation?.orderId;
        return first.status === 'admitted';
      };
      expect(await waitFor(admitted, 10_000)).toBeLessThan(Infinity);
      expect((await call(service.url, 'POST', `/orders/${orderId}/confirm`)).status).toBe(200);
      await waitForText(page, '#line-state', 'sold out');
      const { soldOutAt } = (await call(service.url, 'GET', `/skus/${sku}/line`)).body;
      const shown = await page.evaluate((ms) => new Date(ms).toLocaleTimeString(), Date.parse(soldOutAt));
      await waitForText(page, '#line-sold-out', shown);
      expect(await page.$eval('#line', (el) => el.getAttribute('data-state'))).toBe('sold_out');
      expect(pageErrors).toEqual([]);
    } finally {
      await page.close();
    }
  });

  it('asks for the token when it has none or a wrong one, and its data routes refuse requests without it', async () => {
    const context = await browser.createBrowserContext();
    try {
      const page = await context.newPage();
      await page.goto(`${service.url}/dashboard?sku=anything`);
      await page.waitForSelector('#token-form:not([hidden])', { timeout: 10_000 });
      expect(await page.$eval('#token-problem', (el) => el.textContent)).toBe('');
      const wrong = await context.newPage();
      await wrong.goto(`${service.url}/dashboard?sku=anything#token=not-the-token`);
      await wrong.waitForSelector('#token-form:not([hidden])', { timeout: 10_000 });
      expect(await wrong.$eval('#token-problem', (el) => el.textContent)).toBe('token rejected');
    } finally {
      await context.close();
    }
    expect((await call(service.url, 'GET', '/dashboard/skus')).status).toBe(401);
    expect((await call(service.url, 'GET', '/dashboard/history?sku=x')).status).toBe(401);
    expect(
      (await call(service.url, 'GET', '/dashboard/events?sku=x', undefined, { authorization: 'Bearer nope' })).status,
    ).toBe(401);
    const page = await call(service.url, 'GET', '/dashboard');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(page.headers.get('content-security-policy')).not.toMatch(/unsafe|https?:/);
  });

  it('serves the API docs page, which renders the document with its own files under its policy', async () => {
    const page = await browser.newPage();
    const failures: string[] = [];
    page.on('requestfailed', (request) => failures.push(request.url()));
    page.on('console', (message) => {
      if (message.type() === 'error') failures.push(message.text());
    });
    try {
      await page.goto(`${service.url}/docs`);
      await page.waitForSelector('#operations-orders-placeOrder', { timeout: 15_000 });
      expect(await page.$$eval('.opblock', (blocks) => blocks.length)).toBeGreaterThan(8);
      expect(failures).toEqual([]);
    } finally {
      await page.close();
    }
  });
});

describe("the dashboard's line on the books, in a real browser", () => {
  let own: OwnDatabase;
  let service: ServiceProcess;
  let browser: Browser;
  beforeAll(async () => {
    // A database of its own: the audit's findings are this test's alone.
    own = await createOwnDatabase('dashboard_books');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    service = await ServiceProcess.spawn({ ADMIN_TOKEN, DATABASE_URL: own.url, AUDIT_INTERVAL_MS: '500' });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await service?.stop();
    await own?.drop();
  });

  it('says the books balance, then names the SKU whose segment row was changed behind the service', async () => {
    const sku = uniqueSku('dash-books');
    expect((await call(service.url, 'POST', '/skus', { sku, stock: 40, segments: 4 }, admin)).status).toBe(201);
    expect((await call(service.url, 'POST', '/orders', { sku, quantity: 3 })).status).toBe(201);
    const page = await browser.newPage();
    await page.goto(`${service.url}/dashboard?sku=${sku}#token=${ADMIN_TOKEN}`);
    const audit = () => page.$eval('#audit', (el) => ({ text: el.textContent, state: el.getAttribute('data-state') }));
    const lineMatches = (pattern: string) =>
      page.waitForFunction(
        (source) => {
          const line = document.querySelector('#audit') as HTMLElement | null;
          return !!line && !line.hidden && new RegExp(source).test(line.textContent ?? '');
        },
        { timeout: 10_000, polling: 100 },
        pattern,
      );

    await lineMatches('^books balanced, checked \\d+ s ago$');
    expect((await audit()).state).toBe('balanced');

    // One unit appears from nowhere in a segment: available + reserved + sold no longer equals the stock.
    await sql`update stock_segments set available = available + 1
               where segment = 0 and sku_id = (select id from skus where sku = ${sku})`.execute(own.db);
    await lineMatches(`^books off for 1 SKU\\(s\\): ${sku}, checked \\d+ s ago$`);
    expect((await audit()).state).toBe('unbalanced');
    await page.close();
  });
});
