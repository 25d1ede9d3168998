import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENT_TYPES } from '../../src/events/event-types.js';
import { EventReceiver } from '../support/event-receiver.js';
import { replayTotals } from '../support/event-replay.js';
import { FaultBench } from '../support/fault-bench.js';
import { call } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

const SKUS = 3;
/** How long the receiver stays down. */
const DOWN_MS = 30_000;
/** Order flows per instance; each places, and then confirms, cancels, or lets expire. */
const FLOWS = 40;

/**
 * Two instances place, reserve, confirm, cancel and expire orders on several SKUs while their webhook receiver first
 * answers 500, then is down, then up and slow; the instance delivering is killed with SIGKILL mid-delivery. Every
 * committed change must have exactly one event, each SKU's sequence no gap, and every event must reach the receiver,
 * signed, in each SKU's order.
 */
describe('events and webhooks through failures', () => {
  let bench: FaultBench;
  const receiver = new EventReceiver();

  beforeAll(async () => {
    await receiver.open();
    bench = await FaultBench.start({
      instances: 2,
      env: {
        LOCK_WAIT_MS: '15000',
        EVENTS_POLL_MS: '50',
        WEBHOOK_BACKOFF_BASE_MS: '100',
        WEBHOOK_BACKOFF_MAX_MS: '1000',
        WEBHOOK_TIMEOUT_MS: '2000',
        // The receiver listens on loopback.
        WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: '1',
      },
    });
  });
  afterAll(async () => {
    await bench?.teardown();
    await receiver.close();
  });

  /** The delivery attempts recorded for the endpoint (newest first). */
  const deliveries = async (url: string, id: string) =>
    (await call(url, 'GET', `/webhooks/${id}/deliveries?limit=1000`)).body.deliveries as {
      outcome: string;
      responseStatus: number | null;
    }[];

  it('announces every committed change once, in sequence, and delivers each at least once, signed, in order', async () => {
    const urls = bench.fleet.urls();
    const skus = await Promise.all(Array.from({ length: SKUS }, () => bench.createSku(300, 4)));
    receiver.mode = 'fail';
    const created = await call(urls[0]!, 'POST', '/webhooks', { url: receiver.url, types: [...EVENT_TYPES], skus });
    expect(created.status).toBe(201);
    const hookId = created.body.id as string;
    // An endpoint receives what is sequenced after it registered: here, everything after the SKUs' creation.
    const registeredAt = Number(created.body.deliveredThrough);
    receiver.secret = created.body.secret;

    // Orders from both instances: confirmed at once, reserved then confirmed, reserved then cancelled (a confirmed
    // order too), reserved for 1 s and left to expire.
    const flow = async (url: string, i: number) => {
      const sku = skus[i % SKUS]!;
      const kind = i % 5;
      const placed = await call(url, 'POST', '/orders', {
        sku,
        quantity: 1 + (i % 3),
        ...(kind === 0 ? {} : { holdSeconds: kind === 4 ? 1 : 600 }),
      });
      expect(placed.status).toBe(201);
      const id = placed.body.orderId as string;
      if (kind === 1 || kind === 3) expect((await call(url, 'POST', `/orders/${id}/confirm`)).status).toBe(200);
      if (kind === 2 || kind === 3) expect((await call(url, 'POST', `/orders/${id}/cancel`)).status).toBe(200);
    };
    const load = Promise.all(
      urls.map(async (url, n) => {
        for (let i = 0; i < FLOWS; i += 4) await Promise.all([0, 1, 2, 3].map((j) => flow(url, n * FLOWS + i + j)));
      }),
    );
    // A refused cart writes nothing.
    const cart = await call(urls[1]!, 'POST', '/orders', {
      items: [
        { sku: skus[0], quantity: 1 },
        { sku: skus[1], quantity: 10_000 },
      ],
    });
    expect(cart.status).toBe(400);

    // The receiver fails until the endpoint has been answered 500 a few times, then is down for 30 s (refused, and
    // retried with backoff meanwhile).
    expect(await waitFor(async () => (await deliveries(urls[0]!, hookId)).length >= 3, 30_000)).toBeLessThan(Infinity);
    await receiver.close();
    const downSince = Date.now();
    receiver.mode = 'ok';
    await load;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, downSince + DOWN_MS - Date.now())));
    const refused = (await deliveries(urls[0]!, hookId)).filter((d) => d.responseStatus === null).length;
    expect(refused).toBeGreaterThanOrEqual(2);
    receiver.delayMs = 20;
    await receiver.open();

    // Kill the instance holding the endpoint's lock while it delivers.
    const received = receiver.received.length;
    let holder: number | undefined;
    expect(
      await waitFor(
        async () => {
          const { rows } = await sql<{ application_name: string }>`
          select a.application_name from pg_locks l join pg_stat_activity a on a.pid = l.pid
           where l.locktype = 'advisory' and l.classid = 20 and l.granted`.execute(bench.db);
          holder = Number(/pid (\d+)/.exec(rows[0]?.application_name ?? '')?.[1]);
          return receiver.received.length > received + 5 && bench.fleet.members.some((m) => m.pid === holder);
        },
        30_000,
        20,
      ),
    ).toBeLessThan(Infinity);
    const victim = bench.fleet.members.find((m) => m.pid === holder)!;
    await victim.stop('SIGKILL');
    const survivor = bench.fleet.members.find((m) => m !== victim)!.url;

    // Everything settles: no live reservation left to expire, the outbox drained, the feed delivered.
    const feed = async () => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- feed events, checked field by field
      const all: any[] = [];
      for (const sku of skus) all.push(...(await call(survivor, 'GET', `/events?sku=${sku}&limit=1000`)).body.events);
      return all;
    };
    let state = '';
    const settled = async () => {
      const { rows } = await sql<{ reserved: number; outbox: number }>`
        select (select count(*) from orders where status = 'reserved') as reserved,
               (select count(*) from event_outbox) as outbox`.execute(bench.db);
      const ids = new Set(receiver.received.map((r) => r.id));
      const undelivered = (await feed()).filter((e) => Number(e.id) > registeredAt && !ids.has(e.id)).length;
      state = `reserved ${rows[0]!.reserved}, outbox ${rows[0]!.outbox}, undelivered ${undelivered}`;
      return Number(rows[0]!.reserved) + Number(rows[0]!.outbox) + undelivered === 0;
    };
    const waited = await waitFor(settled, 90_000, 200);
    expect(waited, `${state}\n${JSON.stringify(await call(survivor, 'GET', `/webhooks/${hookId}`))}`).toBeLessThan(
      Infinity,
    );

    const events = await feed();
    for (const sku of skus) {
      const mine = events.filter((e) => e.sku === sku);
      const view = (await call(survivor, 'GET', `/skus/${sku}`)).body;
      expect(replayTotals(mine)).toEqual({ available: view.available, reserved: view.reserved, sold: view.sold });
    }

    // Exactly one event per committed change, none for anything else.
    const { rows: orders } = await sql<{ id: string; status: string; confirmed_slot: number | null }>`
      select distinct o.id, o.status, o.confirmed_slot from orders o join stock_deductions d on d.order_id = o.id
        join skus k on k.id = d.sku_id where k.sku = any(${skus})`.execute(bench.db);
    const count = (type: string, orderId: string) =>
      events.filter((e) => e.type === type && e.data.order?.orderId === orderId).length;
    expect(orders.length).toBe(2 * FLOWS);
    for (const o of orders) {
      expect(count('order.placed', o.id), o.id).toBe(1);
      const confirmedReservation =
        o.confirmed_slot !== null || (o.status === 'cancelled' && count('order.confirmed', o.id) === 1);
      expect(count('order.confirmed', o.id), o.id).toBe(confirmedReservation ? 1 : 0);
      expect(count('order.cancelled', o.id), o.id).toBe(o.status === 'cancelled' ? 1 : 0);
      expect(count('order.expired', o.id), o.id).toBe(o.status === 'expired' ? 1 : 0);
    }
    const known = new Set(orders.map((o) => o.id));
    expect(events.filter((e) => e.data.order && !known.has(e.data.order.orderId))).toEqual([]);
    expect(orders.filter((o) => o.status === 'expired').length).toBeGreaterThan(0);

    // Delivered at least once, each SKU's events first arriving in sequence, every signature verified.
    expect(receiver.received.every((r) => r.verified)).toBe(true);
    for (const sku of skus) {
      const firsts: number[] = [];
      const seen = new Set<string>();
      for (const r of receiver.received) {
        if (r.event.data.sku !== sku || seen.has(r.id)) continue;
        seen.add(r.id);
        firsts.push(r.event.data.sequence);
      }
      // Sequence 1, the SKU's creation, may have been sequenced before the endpoint registered or after.
      expect(firsts[0]).toBeLessThanOrEqual(2);
      expect(firsts).toEqual(firsts.map((_, i) => firsts[0]! + i));
    }
    const r = receiver.received.at(-1)!;
    const headers = { 'webhook-id': r.id, 'webhook-timestamp': r.timestamp, 'webhook-signature': r.signature };
    const wh = new Webhook(receiver.secret!);
    expect(() => wh.verify(r.body, headers)).not.toThrow();
    expect(() => wh.verify(r.body.replace('"sequence":', '"sequence":1'), headers)).toThrow();
    expect(() => wh.verify(r.body, { ...headers, 'webhook-timestamp': String(Number(r.timestamp) - 3600) })).toThrow();
    const outcomes = new Set((await deliveries(survivor, hookId)).map((d) => d.outcome));
    expect(outcomes).toEqual(new Set(['delivered', 'retrying']));
  }, 240_000);
});
