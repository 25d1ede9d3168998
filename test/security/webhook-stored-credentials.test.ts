import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

/** The migration before the one that strips credentials from stored webhook URLs. */
const BEFORE = '20261203000000_scoped_idempotency_keys';
const PASSWORD = `pw-${randomUUID()}`;

/**
 * Webhooks saved before credentials in URLs were refused may carry `user:password@`: after the upgrade no stored URL
 * keeps them, `GET /webhooks` shows none, none is sent to the receiver, and the database refuses to store one again.
 */
describe('webhook URLs saved with credentials before the rule', () => {
  let own: OwnDatabase;
  let receiver: Server;
  let svc: RunningService;
  const received: { url: string; headers: IncomingHttpHeaders; body: string }[] = [];
  const ids = { local: randomUUID(), remote: randomUUID(), atInPath: randomUUID() };

  beforeAll(async () => {
    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      req.on('end', () => {
        received.push({ url: req.url!, headers: req.headers, body });
        res.writeHead(200).end();
      });
    });
    receiver.listen(0, '127.0.0.1');
    await once(receiver, 'listening');
    const port = (receiver.address() as AddressInfo).port;

    own = await createOwnDatabase('hookcreds');
    expect((await own.migrator.migrateTo(BEFORE)).error).toBeUndefined();
    const row = (id: string, url: string) => ({
      id,
      url,
      types: ['order.placed'],
      skus: null,
      secret: `whsec_${Buffer.alloc(32, 7).toString('base64')}`,
      cursor: 0,
    });
    await own.db
      .insertInto('webhooks')
      .values([
        row(ids.local, `http://hookuser:${PASSWORD}@127.0.0.1:${port}/hook?from=before`),
        row(ids.remote, `https://a%40b:${PASSWORD}@shop.example/hooks/stock`),
        row(ids.atInPath, 'https://shop.example/hooks/@team?to=a@b'),
      ])
      .execute();
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    svc = await startService({
      DATABASE_URL: own.url,
      WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: '1',
      EVENTS_POLL_MS: '20',
    });
  });
  afterAll(async () => {
    await svc?.stop();
    await own?.drop();
    receiver?.closeAllConnections();
    await new Promise((resolve) => receiver?.close(resolve));
  });

  it('keeps the URLs without their credentials, and shows none back', async () => {
    const listed = await call(svc.url, 'GET', '/webhooks');
    expect(listed.status).toBe(200);
    const urls = Object.fromEntries(
      (listed.body.webhooks as { id: string; url: string }[]).map((hook) => [hook.id, hook.url]),
    );
    const port = (receiver.address() as AddressInfo).port;
    expect(urls).toEqual({
      [ids.local]: `http://127.0.0.1:${port}/hook?from=before`,
      [ids.remote]: 'https://shop.example/hooks/stock',
      [ids.atInPath]: 'https://shop.example/hooks/@team?to=a@b',
    });
    expect(JSON.stringify(listed.body)).not.toContain(PASSWORD);
    const stored = await own.db.selectFrom('webhooks').select('url').execute();
    expect(JSON.stringify(stored)).not.toContain(PASSWORD);
  });

  it('sends deliveries without them', async () => {
    const sku = uniqueSku('hookcreds');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 5, segments: 1 })).status).toBe(201);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 1 })).status).toBe(201);
    expect(await waitFor(() => received.length > 0, 10_000)).toBeLessThan(Infinity);
    const [delivery] = received;
    expect(delivery!.url).toBe('/hook?from=before');
    expect(delivery!.headers.authorization).toBeUndefined();
    expect(JSON.stringify(received)).not.toContain(PASSWORD);
  });

  it('refuses to store credentials in a URL again, whatever writes the row', async () => {
    const stored = sql`insert into webhooks (id, url, types, secret, cursor)
                       values (${randomUUID()}, ${`https://user:${PASSWORD}@shop.example/`}, '{order.placed}', 'whsec_x', 0)`;
    await expect(stored.execute(own.db)).rejects.toThrow(/webhooks_url_without_credentials/);
  });
});
