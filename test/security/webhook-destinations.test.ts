import { once } from 'node:events';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StockService } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { EVENT_TYPES } from '../../src/events/event-types.js';
import { insertWebhook } from '../../src/events/webhook.repository.js';
import { DestinationGuard, DestinationRefused, refusedRange } from '../../src/events/webhook-destinations.js';
import { createLogger } from '../../src/logger.js';
import { redisTopology } from '../../src/redis/connections.js';
import { EventReceiver } from '../support/event-receiver.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, testEndpoints, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

/**
 * Webhooks cannot be aimed inside the network: every address form an attacker holding `webhooks:manage` tried is
 * refused when saved, and — registered anyway (a row from before the check, or a name that resolves elsewhere later)
 * — refused when the connection is made, with nothing reaching a loopback listener. With
 * WEBHOOK_ALLOW_PRIVATE_DESTINATIONS a loopback receiver works. Each service has a database of its own, so no other
 * test's service (with the setting on) delivers these endpoints.
 */

/** Counts every TCP connection made to a port on 127.0.0.1 and on ::1 (a TLS ClientHello counts as much). */
class LoopbackListener {
  connections = 0;
  port = 0;
  private readonly servers: Server[] = [];
  private readonly sockets = new Set<Socket>();

  async open(): Promise<void> {
    for (const host of ['127.0.0.1', '::1']) {
      const server = createServer((socket) => {
        this.connections++;
        this.sockets.add(socket);
        socket.on('close', () => this.sockets.delete(socket));
        socket.on('error', () => {});
      });
      server.listen(this.port, host);
      await once(server, 'listening');
      this.port = (server.address() as AddressInfo).port;
      this.servers.push(server);
    }
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await Promise.all(this.servers.map((s) => new Promise((resolve) => s.close(resolve))));
  }
}

/** The service in this process on its own database, with `env` on top. */
async function startOwnService(own: OwnDatabase, env: Record<string, string>) {
  const config = loadConfig({
    LOG_LEVEL: 'silent',
    REDIS_URL: testEndpoints().redisUrl,
    DATABASE_URL: own.url,
    EVENTS_POLL_MS: '20',
    WEBHOOK_BACKOFF_BASE_MS: '60000',
    WEBHOOK_TIMEOUT_MS: '2000',
    ...env,
  });
  const service = new StockService(config, createLogger('silent'), {
    redis: redisTopology(config),
    databaseUrl: own.url,
  });
  const port = await service.start(0, '127.0.0.1');
  return { service, url: `http://127.0.0.1:${port}`, port };
}

interface Delivery {
  outcome: string;
  responseStatus: number | null;
  error: string | null;
}

describe('webhook destinations (WEBHOOK_ALLOW_PRIVATE_DESTINATIONS off, the default)', () => {
  const listener = new LoopbackListener();
  let own: OwnDatabase;
  let svc: Awaited<ReturnType<typeof startOwnService>>;

  beforeAll(async () => {
    await listener.open();
    own = await createOwnDatabase('webhook_probe');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    svc = await startOwnService(own, {});
  });
  afterAll(async () => {
    await svc?.service.stop();
    await own?.drop();
    await listener.close();
  });

  /** Every form the probe of the service tried, each aimed at the listener where it names a port. */
  const forms = (): string[] => {
    const p = listener.port;
    return [
      `http://127.0.0.1:${p}/`,
      `http://localhost:${p}/`,
      `http://[::1]:${p}/`,
      `http://127.1:${p}/`,
      `http://2130706433:${p}/`,
      `http://0x7f000001:${p}/`,
      `http://localhost:${svc.port}/skus`,
      `https://127.0.0.1:${p}/`,
      `https://0.0.0.0:${p}/`,
      `https://[::ffff:127.0.0.1]:${p}/`,
      `https://[::ffff:7f00:1]:${p}/`,
      `https://[64:ff9b::7f00:1]:${p}/`,
      `https://[2002:7f00:1::]:${p}/`,
      `https://[::127.0.0.1]:${p}/`,
      `https://[::7f00:1]:${p}/`,
      `https://[2600::5efe:127.0.0.1]:${p}/`,
      `https://[64:ff9b:1::7f00:1]:${p}/`,
      `https://[::]:${p}/`,
      `https://169.254.169.254/latest/meta-data/`,
      `https://10.0.0.1/`,
      `https://172.16.0.1/`,
      `https://192.168.1.1/`,
      `https://100.64.0.1/`,
      `https://224.0.0.1/`,
      `https://[fd00::1]/`,
      `https://[fe80::1]/`,
      `https://[ff02::1]/`,
    ];
  };

  it('refuses every private, loopback and shorthand form when saved, naming the rule, and saves nothing', async () => {
    for (const url of forms()) {
      const answer = await call(svc.url, 'POST', '/webhooks', { url, types: ['order.placed'] });
      expect(answer.status, url).toBe(422);
      expect(answer.body.code, url).toBe('webhook_destination_refused');
      expect(answer.body.rule, url).toMatch(
        /loopback|private|linkLocal|uniqueLocal|unspecified|multicast|carrierGradeNat|rfc6052|form of/,
      );
      expect(answer.body.detail, url).toContain('public addresses only');
    }
    // The same on a change of URL.
    const created = await insertWebhook(svc.service.db, {
      url: 'https://hooks.example.com/in',
      types: ['sku.created'],
    });
    const patched = await call(svc.url, 'PATCH', `/webhooks/${created.id}`, {
      url: `https://127.0.0.1:${listener.port}/`,
    });
    expect(patched.status).toBe(422);
    await call(svc.url, 'DELETE', `/webhooks/${created.id}`);
    expect((await call(svc.url, 'GET', '/webhooks')).body.webhooks).toEqual([]);
  });

  it('refuses a URL with an IPv6 zone id with 400, on create and on change, and saves nothing', async () => {
    const created = await insertWebhook(svc.service.db, {
      url: 'https://hooks.example.com/in',
      types: ['sku.created'],
    });
    for (const url of ['https://[::1%25lo]/x', 'https://[fe80::1%25eth0]/x', 'https://[fe80::1%eth0]/x']) {
      const answer = await call(svc.url, 'POST', '/webhooks', { url, types: ['order.placed'] });
      expect(answer.status, url).toBe(400);
      expect(answer.body.code, url).toBe('bad_request');
      expect((await call(svc.url, 'PATCH', `/webhooks/${created.id}`, { url })).status, url).toBe(400);
    }
    const listed = (await call(svc.url, 'GET', '/webhooks')).body.webhooks as { url: string }[];
    expect(listed.map((hook) => hook.url)).toEqual(['https://hooks.example.com/in']);
    await call(svc.url, 'DELETE', `/webhooks/${created.id}`);
  });

  it('refuses URLs with credentials, and never shows them', async () => {
    const answer = await call(svc.url, 'POST', '/webhooks', {
      url: 'https://user:secretpw@hooks.example.com/in',
      types: ['order.placed'],
    });
    expect(answer.status).toBe(400);
    expect(answer.body.detail).toContain('credentials');
    expect(JSON.stringify((await call(svc.url, 'GET', '/webhooks')).body)).not.toContain('secretpw');
    // An empty user part parses as no user, but the text still carries one: 400, as the table's check would refuse it.
    for (const url of ['https://@hooks.example.com/in', 'https://@&&!*#c@x/']) {
      const empty = await call(svc.url, 'POST', '/webhooks', { url, types: ['order.placed'] });
      expect(empty.status, url).toBe(400);
      expect(empty.body.detail).toContain('credentials');
    }
  });

  it('refuses each form again where the connection is made: nothing reaches the listener, recorded `unreachable`', async () => {
    // Registered behind the save check's back: rows from before it existed, or names that resolved elsewhere then.
    const hooks: { id: string; url: string }[] = [];
    for (const url of forms()) hooks.push(await insertWebhook(svc.service.db, { url, types: [...EVENT_TYPES] }));
    expect((await call(svc.url, 'POST', '/skus', { sku: uniqueSku('probe'), stock: 5, segments: 1 })).status).toBe(201);
    const deliveries = async (id: string) =>
      (await call(svc.url, 'GET', `/webhooks/${id}/deliveries`)).body.deliveries as Delivery[];
    const attempted = await waitFor(async () => {
      for (const hook of hooks) if ((await deliveries(hook.id)).length === 0) return false;
      return true;
    }, 20_000);
    expect(listener.connections).toBe(0);
    expect(attempted).toBeLessThan(Infinity);
    for (const hook of hooks) {
      expect(await deliveries(hook.id), hook.url).toEqual([
        expect.objectContaining({ outcome: 'retrying', responseStatus: null, error: 'unreachable' }),
      ]);
    }
  });
});

describe('webhook destinations with WEBHOOK_ALLOW_PRIVATE_DESTINATIONS=1', () => {
  const receiver = new EventReceiver();
  const silent = new LoopbackListener();
  let redirector: HttpServer;
  let own: OwnDatabase;
  let svc: Awaited<ReturnType<typeof startOwnService>>;

  beforeAll(async () => {
    await receiver.open();
    await silent.open();
    // Answers every delivery with a redirect to the receiver: not followed.
    redirector = createHttpServer((req, res) => {
      req.resume().on('end', () => res.writeHead(307, { location: receiver.url }).end());
    });
    await once(redirector.listen(0, '127.0.0.1'), 'listening');
    own = await createOwnDatabase('webhook_local');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    svc = await startOwnService(own, { WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: '1' });
  });
  afterAll(async () => {
    await svc?.service.stop();
    await own?.drop();
    await receiver.close();
    await silent.close();
    await new Promise((resolve) => redirector?.close(resolve));
  });

  it('delivers to a loopback receiver; a closed port and an open non-HTTP one read alike; redirects stay unfollowed', async () => {
    const closed = new LoopbackListener();
    await closed.open();
    await closed.close(); // nothing listens there now
    const hook = async (url: string) => {
      const answer = await call(svc.url, 'POST', '/webhooks', { url, types: ['sku.created'] });
      expect(answer.status, url).toBe(201);
      return answer.body as { id: string; secret: string };
    };
    const delivered = await hook(receiver.url);
    receiver.secret = delivered.secret;
    const refused = await hook(`http://127.0.0.1:${closed.port}/`);
    // Accepts the connection and closes it on the first byte: an open port that speaks no HTTP.
    const mute = createServer((socket) => socket.once('data', () => socket.destroy()));
    await once(mute.listen(0, '127.0.0.1'), 'listening');
    const nonHttp = await hook(`http://127.0.0.1:${(mute.address() as AddressInfo).port}/`);
    const redirected = await hook(`http://127.0.0.1:${(redirector.address() as AddressInfo).port}/`);
    try {
      const sku = uniqueSku('local');
      expect((await call(svc.url, 'POST', '/skus', { sku, stock: 5, segments: 1 })).status).toBe(201);
      const deliveries = async (id: string) =>
        (await call(svc.url, 'GET', `/webhooks/${id}/deliveries`)).body.deliveries as Delivery[];
      const all = [delivered, refused, nonHttp, redirected];
      const attempted = await waitFor(async () => {
        for (const { id } of all) if ((await deliveries(id)).length === 0) return false;
        return true;
      }, 20_000);
      expect(attempted).toBeLessThan(Infinity);
      expect(receiver.received.map((r) => [r.event.data.sku, r.verified])).toEqual([[sku, true]]);
      expect(await deliveries(delivered.id)).toEqual([
        expect.objectContaining({ outcome: 'delivered', responseStatus: 200, error: null }),
      ]);
      const failure = { outcome: 'retrying', responseStatus: null, error: 'unreachable' };
      expect(await deliveries(refused.id)).toEqual([expect.objectContaining(failure)]);
      expect(await deliveries(nonHttp.id)).toEqual([expect.objectContaining(failure)]);
      expect(await deliveries(redirected.id)).toEqual([
        expect.objectContaining({ outcome: 'retrying', responseStatus: 307, error: null }),
      ]);
    } finally {
      await new Promise((resolve) => mute.close(resolve));
    }
  });
});

describe('the destination check itself', () => {
  it('judges addresses by their range, embedded IPv4 by the address it carries, and the host’s own addresses', () => {
    const none = new Set<string>();
    expect(refusedRange('8.8.8.8', none)).toBeUndefined();
    expect(refusedRange('2606:4700:4700::1111', none)).toBeUndefined();
    expect(refusedRange('::ffff:8.8.8.8', none)).toBeUndefined();
    expect(refusedRange('127.1', none)).toBe('loopback');
    expect(refusedRange('2130706433', none)).toBe('loopback');
    expect(refusedRange('0x7f000001', none)).toBe('loopback');
    expect(refusedRange('100.127.255.255', none)).toBe('carrierGradeNat');
    expect(refusedRange('::ffff:10.1.2.3', none)).toBe('ipv4Mapped form of private');
    expect(refusedRange('64:ff9b::a9fe:a9fe', none)).toBe('rfc6052 form of linkLocal');
    expect(refusedRange('2001::1', none)).toBe('teredo');
    // IPv4-compatible (::a.b.c.d), ISATAP interface ids and the local-use NAT64 prefix.
    expect(refusedRange('::7f00:1', none)).toBe('ipv4Compatible form of loopback');
    expect(refusedRange('::a00:1', none)).toBe('ipv4Compatible form of private');
    expect(refusedRange('::2', none)).toBe('ipv4Compatible form of unspecified');
    expect(refusedRange('::808:808', none)).toBeUndefined();
    expect(refusedRange('2600::5efe:a9fe:a9fe', none)).toBe('ISATAP form of linkLocal');
    expect(refusedRange('2600::200:5efe:7f00:1', none)).toBe('ISATAP form of loopback');
    expect(refusedRange('2600::5efe:808:808', none)).toBeUndefined();
    expect(refusedRange('64:ff9b:1::808:808', none)).toBe('rfc6052');
    expect(refusedRange('fe80::1%eth0', none)).toBe('zoned (link-scoped)');
    expect(refusedRange('8.8.8.8', new Set(['8.8.8.8']))).toBe("the service's own address");
  });

  it('refuses a name when any address it resolves to is refused, and connects to the one it checked', async () => {
    const rebinding = new DestinationGuard(false, async () => [{ address: '8.8.8.8' }, { address: '127.0.0.1' }]);
    await expect(rebinding.resolve('hooks.example.com')).rejects.toBeInstanceOf(DestinationRefused);
    const mapped = new DestinationGuard(false, async () => [{ address: '::ffff:169.254.169.254' }]);
    await expect(mapped.resolve('hooks.example.com')).rejects.toThrow(/ipv4Mapped form of linkLocal/);
    const publicOnly = new DestinationGuard(false, async () => [{ address: '8.8.4.4' }, { address: '8.8.8.8' }]);
    expect(await publicOnly.resolve('hooks.example.com')).toBe('8.8.4.4');
    expect(await new DestinationGuard(true, async () => [{ address: '127.0.0.1' }]).resolve('x.test')).toBe(
      '127.0.0.1',
    );
  });
});
