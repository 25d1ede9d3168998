import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Browser, Page } from 'puppeteer-core';
import { launchChromium } from '../support/chromium.js';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { OrderLoad } from '../support/order-load.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { MetricsSnapshot } from '../support/scrape-metric.js';
import { ServiceFleet } from '../support/service-fleet.js';
import { call, uniqueSku } from '../support/service.js';

const ADMIN_TOKEN = `fleet-${randomBytes(12).toString('hex')}`;
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
const REASONS = ['placed', 'out_of_stock', 'not_on_sale', 'purchase_limit', 'lock_busy'] as const;
/** Where the README's screenshots are written when SCREENSHOTS=1. */
const IMAGES = 'docs/images';

/** The page's last-hour totals of the SKU, by reason, from the table the series feed. */
function pageTotals(page: Page): Promise<Record<string, number>> {
  return page.$$eval('#refusals tr[data-reason]', (rows) =>
    Object.fromEntries(rows.map((row) => [row.getAttribute('data-reason'), Number(row.getAttribute('data-total'))])),
  );
}

/** Each instance's own count of order answers by outcome (Prometheus), summed over the fleet. */
async function instanceTotals(urls: string[]): Promise<Record<string, number>> {
  const totals: Record<string, number> = Object.fromEntries(REASONS.map((reason) => [reason, 0]));
  for (const url of urls) {
    const scrape = await MetricsSnapshot.scrape(`${url}/metrics`, ADMIN_TOKEN);
    for (const [outcome, n] of Object.entries(scrape.byLabel('stock_orders_total', 'outcome')))
      if (outcome in totals) totals[outcome]! += n;
  }
  return totals;
}

describe('the dashboard of a fleet of two instances, in a real browser', () => {
  let own: OwnDatabase;
  let fleet: ServiceFleet;
  let browser: Browser;
  beforeAll(async () => {
    // The instances' own counts are the yardstick, so they must count this test's orders only. On the shared database
    // they would also admit tickets of waiting lines earlier test files left open: orders of other SKUs.
    own = await createOwnDatabase('fleet_dashboard');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    fleet = await ServiceFleet.start(2, { ADMIN_TOKEN, DATABASE_URL: own.url });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await fleet?.stopAll();
    await own?.drop();
  });

  it("shows the fleet's sum by reason from either instance, with the sale's timeline, and keeps it over a reload", async () => {
    const [a, b] = fleet.members as [(typeof fleet.members)[0], (typeof fleet.members)[0]];
    // A failure shows what the instances warned of: a failed write of the series, a read that failed.
    onTestFailed(() => {
      const warnings = fleet
        .logs()
        .split('\n')
        .filter((line) => /^---|"level":[456]0/.test(line));
      console.log(`[fleet-dashboard] the instances' warnings:\n${warnings.join('\n')}`);
    });
    const sku = uniqueSku('fleet-dash');
    // Far enough ahead for ten refused orders on a busy machine.
    const opensAt = Date.now() + 10_000;
    const created = await call(
      a.url,
      'POST',
      '/skus',
      { sku, stock: 1500, segments: 8, saleStartsAt: new Date(opensAt).toISOString() },
      admin,
    );
    expect(created.status).toBe(201);
    // Before the opening, both instances refuse: not on sale.
    for (const member of [a, b])
      for (let i = 0; i < 5; i++)
        expect((await call(member.url, 'POST', '/orders', { sku, quantity: 1 })).body.code).toBe('not_on_sale');

    // The page opens after those refusals: it shows them from the stored history.
    const page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 1500 });
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(String(error)));
    page.on('console', (message) => {
      if (message.type() === 'error') pageErrors.push(message.text());
    });
    await page.goto(`${a.url}/dashboard?sku=${sku}#token=${ADMIN_TOKEN}`);

    await sleep(Math.max(0, opensAt - Date.now() + 300));

    // A sale across both instances, until sold out (the last orders are refused: out of stock).
    const load = new OrderLoad({
      sku,
      targets: () => [a.url, b.url],
      workers: 16,
      maxQuantity: 2,
      maxIntents: 5_000,
      maxDurationMs: 90_000,
      retryBudgetMs: 30_000,
    }).start();
    expect(await load.untilAcknowledged(500)).toBe(true);
    // Mid-sale the page charts what has been placed so far, from both instances.
    await page.waitForFunction(
      () => Number(document.querySelector('#refusals tr[data-reason="placed"]')?.getAttribute('data-total')) > 0,
      {
        timeout: 10_000,
        polling: 200,
      },
    );
    if (process.env.SCREENSHOTS) {
      mkdirSync(IMAGES, { recursive: true });
      await page.screenshot({ path: `${IMAGES}/dashboard-sale.png`, fullPage: true });
    }
    await load.finished();
    const acknowledged = load.intents.filter((intent) => intent.outcome === 'acknowledged').length;
    expect(acknowledged).toBeGreaterThan(0);

    // Every count reaches the page within two seconds of its answer (a flush, then a snapshot): once the load is over
    // the page's totals equal the two instances' own counts exactly, whichever instance serves the page.
    const expected = await instanceTotals([a.url, b.url]);
    expect(expected.not_on_sale).toBe(10);
    expect(expected.out_of_stock).toBeGreaterThan(0);
    expect(expected.placed).toBeGreaterThanOrEqual(acknowledged);
    // Polled, so that a page that never settles fails with what it shows against what the instances counted.
    const settled = (on: Page) =>
      expect.poll(() => pageTotals(on), { timeout: 10_000, interval: 200 }).toEqual(expected);
    await settled(page);

    // The timeline: the opening and the sell-out, from the event feed.
    await page.waitForSelector('#events tr[data-type="sku.sold_out"]', { timeout: 10_000 });
    expect(await page.$$eval('#events tr[data-type]', (rows) => rows.map((r) => r.getAttribute('data-type')))).toEqual(
      expect.arrayContaining(['sku.sale_opened', 'sku.sold_out', 'sku.created']),
    );
    // Both instances are listed, ready.
    const instances = await page.$$eval('#instances li', (items) =>
      items.map((item) => [item.textContent, item.getAttribute('data-state')]),
    );
    for (const member of [a, b])
      expect(instances).toContainEqual([expect.stringContaining(`pid ${member.pid}: ready`), 'ready']);
    // Segment bars: sold out, every bar is empty.
    const widths = await page.$$eval('#segments .bar', (bars) => bars.map((bar) => (bar as HTMLElement).style.width));
    expect(widths).toEqual(new Array(8).fill('0%'));
    if (process.env.SCREENSHOTS) await page.screenshot({ path: `${IMAGES}/dashboard-sold-out.png`, fullPage: true });

    // The other instance serves the same picture; a reload keeps the history (it comes from Redis, not the page).
    const other = await browser.newPage();
    await other.setViewport({ width: 1400, height: 1500 });
    other.on('pageerror', (error) => pageErrors.push(String(error)));
    await other.goto(`${b.url}/dashboard?sku=${sku}#token=${ADMIN_TOKEN}`);
    await settled(other);
    expect(await other.$eval('#instance', (el) => el.textContent)).toContain(`pid ${b.pid}`);
    await page.reload();
    await settled(page);
    expect(pageErrors).toEqual([]);
    await Promise.all([page.close(), other.close()]);
  });
});
