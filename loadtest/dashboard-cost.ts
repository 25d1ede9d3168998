/**
 * What the dashboard costs the order path: the same short autocannon round of POST /orders on one SKU with no
 * browser watching, then with `--watchers` event streams open on that SKU (what 20 open dashboards cost), then
 * without again. With `--screenshot <png>`, a Chromium dashboard is photographed during the watched round.
 *
 *   npm run build --silent && node dist/loadtest/dashboard-cost.js --seconds 8 --watchers 20
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import puppeteer from 'puppeteer-core';
import { startBackingServices } from './infra/backing-services.js';
import { LocalService } from './infra/service-process.js';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '8' },
    watchers: { type: 'string', default: '20' },
    connections: { type: 'string', default: '16' },
    screenshot: { type: 'string' },
  },
});
const seconds = Number(values.seconds);
const watcherCount = Number(values.watchers);

const backing = await startBackingServices();
const service = await LocalService.start(backing, { label: 'dashboard-cost' });
try {
  const sku = `dash-cost-${Date.now().toString(36)}`;
  const created = await fetch(`${service.url}/skus`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ sku, stock: 1_000_000_000, segments: 8 }),
  });
  if (created.status !== 201) throw new Error(`POST /skus: ${created.status}`);

  const round = async (label: string) => {
    const result = await autocannon({
      url: `${service.url}/orders`,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sku, quantity: 1 }),
      connections: Number(values.connections),
      duration: seconds,
    });
    const row = {
      round: label,
      ordersPerSecond: Math.round(result.requests.average),
      p50ms: result.latency.p50,
      p99ms: result.latency.p99,
      non2xx: result.non2xx,
    };
    console.log(JSON.stringify(row));
    return row;
  };

  await round('warm-up');
  await round('no dashboard');
  const watchers = Array.from({ length: watcherCount }, () => new AbortController());
  const received: number[] = watchers.map(() => 0);
  await Promise.all(
    watchers.map(async (controller, i) => {
      const response = await fetch(`${service.url}/dashboard/events?sku=${sku}`, { signal: controller.signal });
      void (async () => {
        try {
          for await (const chunk of response.body!) received[i]! += String(chunk).length > 0 ? 1 : 0;
        } catch {
          /* aborted at the end */
        }
      })();
    }),
  );
  const browser = values.screenshot
    ? await puppeteer.launch({
        executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
        args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
      })
    : undefined;
  const page = await browser?.newPage();
  await page?.setViewport({ width: 1000, height: 640 });
  await page?.goto(`${service.url}/dashboard?sku=${sku}`);
  const watched = round(`${watcherCount} dashboards`);
  if (page) {
    await sleep((seconds * 1000) / 2);
    await page.screenshot({ path: values.screenshot! });
  }
  await watched;
  await browser?.close();
  for (const controller of watchers) controller.abort();
  console.log(JSON.stringify({ eventsReceivedPerWatcher: received }));
  await sleep(500);
  await round('no dashboard again');
} finally {
  await service.stop();
  await backing.stop();
}
