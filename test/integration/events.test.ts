import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeBatch } from '../../src/orders/order-writes.js';
import { EventReceiver } from '../support/event-receiver.js';
import { replayTotals } from '../support/event-replay.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

const ADMIN_TOKEN = 'test-admin-token-0123456789';
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

/** Events, the feed, the stream and webhooks, against one service in this process (events sequenced every 20 ms). */
describe('events', () => {
  let svc: RunningService;
  const get = (path: string, headers = admin) => call(svc.url, 'GET', path, undefined, headers);
  const post = (path: string, body?: unknown) => call(svc.url, 'POST', path, body, admin);
  const createSku = async (stock: number, segments: number, extra: object = {}) => {
    const sku = uniqueSku('ev');
    expect((await post('/skus', { sku, stock, segments, ...extra })).status).toBe(201);
    return sku;
  };
  /** Every event of the SKU, once the feed holds at least `count` of them (bounded wait). */
  const eventsOf = async (sku: string, count: number) => {
    let events: { type: string }[] = [];
    const waited = await waitFor(async () => {
      events = (await get(`/events?sku=${sku}&limit=1000`)).body.events;
      return events.length >= count;
    }, 10_000);
    expect(waited, `${count} events of ${sku}; got ${events.map((e) => e.type).join(', ')}`).toBeLessThan(Infinity);
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- feed events
    return events as any[];
  };

  /** The SKU's id and its segment 0 as stored: for writing a batch straight through `writeBatch`. */
  const firstSegment = async (sku: string) => {
    const { db } = svc.service;
    const { id: skuId } = await db.selectFrom('skus').select('id').where('sku', '=', sku).executeTakeFirstOrThrow();
    const seg = await db
      .selectFrom('stock_segments')
      .selectAll()
      .where('sku_id', '=', skuId)
      .where('segment', '=', 0)
      .executeTakeFirstOrThrow();
    return { skuId, seg };
  };

  beforeAll(async () => {
    svc = await startService({
      ADMIN_TOKEN,
      EVENTS_POLL_MS: '20',
      WEBHOOK_BACKOFF_BASE_MS: '50',
      // The receivers listen on loopback.
      WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: '1',
    });
  });
  afterAll(() => svc?.stop());

  it('writes each change as one event, in sequence, with the totals after it; replayed, they give the books', async () => {
    const sku = await createSku(10, 2, { lowStockThreshold: 3 });
    const order = async (quantity: number, holdSeconds?: number) => {
      const placed = await post('/orders', { sku, quantity, ...(holdSeconds && { holdSeconds }) });
      expect(placed.status).toBe(201);
      return placed.body.orderId as string;
    };
    await order(2);
    const reserved = await order(3, 600);
    expect((await post(`/orders/${reserved}/confirm`)).status).toBe(200);
    const cancelled = await order(1, 600);
    expect((await post(`/orders/${cancelled}/cancel`)).status).toBe(200);
    await order(1, 1);
    // The sweep expires it within about 2 s of its hold running out.
    await eventsOf(sku, 8);
    await order(5);
    expect((await post('/orders', { sku, quantity: 1 })).body.code).toBe('out_of_stock');
    expect((await post(`/skus/${sku}/restock`, { quantity: 5 })).status).toBe(200);
    expect((await call(svc.url, 'PUT', `/skus/${sku}/segments`, { segments: 3 }, admin)).status).toBe(200);
    expect((await call(svc.url, 'PATCH', `/skus/${sku}`, { maxPerCustomer: 2 }, admin)).status).toBe(200);
    expect((await call(svc.url, 'PATCH', `/skus/${sku}`, { lowStockThreshold: 1 }, admin)).status).toBe(200);

    const events = await eventsOf(sku, 16);
    expect(events.map((e) => e.type)).toEqual(
      [
        'sku.created',
        'order.placed',
        'order.placed',
        'order.confirmed',
        'order.placed',
        'order.cancelled',
        'order.placed',
        'order.expired',
        'order.placed',
        'sku.low_stock',
        'sku.sold_out',
        'sku.restocked',
        'sku.back_in_stock',
        'sku.resegmented',
        'sku.limit_changed',
        'sku.threshold_changed',
      ].slice(0, events.length),
    );
    expect(events).toHaveLength(16);
    expect(events[0].data.sku).toMatchObject({ stock: 10, segments: 2, lowStockThreshold: 3 });
    expect(events[3].data.order).toMatchObject({ orderId: reserved, status: 'confirmed', quantity: 3 });
    expect(events[9].data).toMatchObject({ cause: { id: events[8].id, type: 'order.placed' }, lowStockThreshold: 3 });
    // Ids are global and increasing; every event's totals follow from the changes before it.
    const ids = events.map((e) => Number(e.id));
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    const books = replayTotals(events);
    const view = (await get(`/skus/${sku}`)).body;
    expect(books).toEqual({ available: view.available, reserved: view.reserved, sold: view.sold });
    expect(view).toMatchObject({ available: 5, reserved: 0, sold: 10, lowStockThreshold: 1, maxPerCustomer: 2 });
  });

  it("announces a line's draw, each admission and its sold-out moment, in order and without moving stock", async () => {
    const sku = await createSku(2, 2, { saleStartsAt: new Date(Date.now() + 1_500).toISOString() });
    expect((await call(svc.url, 'PUT', `/skus/${sku}/line`, { capacity: 10, holdSeconds: 60 }, admin)).status).toBe(
      200,
    );
    const ids: string[] = [];
    for (const customerId of ['e1', 'e2', 'e3', 'e4']) {
      ids.push((await post(`/skus/${sku}/line`, { customerId })).body.ticketId as string);
    }
    const tickets = async () => Promise.all(ids.map(async (id) => (await get(`/line-tickets/${id}`)).body));
    let admitted: { ticketId: string; customerId: string; position: number; reservation: { orderId: string } }[] = [];
    const twoAdmitted = async () => {
      admitted = (await tickets()).filter((t) => t.status === 'admitted');
      return admitted.length === 2;
    };
    expect(await waitFor(twoAdmitted, 10_000)).toBeLessThan(Infinity);
    for (const ticket of admitted) {
      expect((await post(`/orders/${ticket.reservation.orderId}/confirm`)).status).toBe(200);
    }
    const lineSoldOut = async () => (await get(`/skus/${sku}/line`)).body.status === 'sold_out';
    expect(await waitFor(lineSoldOut, 10_000)).toBeLessThan(Infinity);
    const line = (await get(`/skus/${sku}/line`)).body;

    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- feed events
    let events: any[] = [];
    const soldOutEvent = async () => (events = await eventsOf(sku, 1)).some((e) => e.type === 'line.sold_out');
    expect(await waitFor(soldOutEvent, 5_000)).toBeLessThan(Infinity);
    const ofLine = events.filter((e) => e.type.startsWith('line.') || e.type.startsWith('order.'));
    // The draw before anything is admitted; each admission after its reservation; sold out after the last confirm.
    const types = ofLine.map((e) => e.type);
    expect(types[0]).toBe('line.opened');
    expect(types.at(-1)).toBe('line.sold_out');
    expect(types.filter((t) => t === 'line.admitted')).toHaveLength(2);
    expect(types.filter((t) => t === 'line.opened' || t === 'line.sold_out')).toHaveLength(2);
    expect(ofLine[0].data.draw).toEqual({ preLineTickets: 4, seed: line.draw.seed, drawnAt: line.draw.drawnAt });
    const byPosition = [...admitted].sort((a, b) => a.position - b.position);
    const admissions = ofLine.filter((e) => e.type === 'line.admitted').map((e) => e.data.admission);
    expect(admissions).toEqual(
      byPosition.map((t) => ({
        ticketId: t.ticketId,
        customerId: t.customerId,
        orderId: t.reservation.orderId,
        quantity: 1,
        position: t.position,
      })),
    );
    expect(admissions.map((a) => a.position)).toEqual([1, 2]);
    for (const { orderId } of admissions) {
      const placedAt = ofLine.findIndex((e) => e.type === 'order.placed' && e.data.order.orderId === orderId);
      const admittedAt = ofLine.findIndex((e) => e.type === 'line.admitted' && e.data.admission.orderId === orderId);
      expect(placedAt).toBeGreaterThanOrEqual(0);
      expect(admittedAt).toBeGreaterThan(placedAt);
    }
    expect(types.slice(-3)).toEqual(['order.confirmed', 'order.confirmed', 'line.sold_out']);
    expect(ofLine.at(-1).data.line).toEqual({ soldOutAt: line.soldOutAt, tickets: 4, admittedThrough: 2, waiting: 2 });
    // The line's events move no stock: replayed, the feed still gives the books.
    const view = (await get(`/skus/${sku}`)).body;
    expect(replayTotals(events)).toEqual({ available: view.available, reserved: view.reserved, sold: view.sold });
    expect(view).toMatchObject({ available: 0, reserved: 0, sold: 2 });
  });

  it('announces the draw made by the first join after the opening, once, with an empty pre-line', async () => {
    const sku = await createSku(5, 1);
    expect((await call(svc.url, 'PUT', `/skus/${sku}/line`, { capacity: 10 }, admin)).status).toBe(200);
    await Promise.all(['j1', 'j2', 'j3'].map((customerId) => post(`/skus/${sku}/line`, { customerId })));
    const line = (await get(`/skus/${sku}/line`)).body;
    const events = await eventsOf(sku, 2);
    const opened = events.filter((e) => e.type === 'line.opened');
    expect(opened.map((e) => e.data.draw)).toEqual([
      { preLineTickets: 0, seed: line.draw.seed, drawnAt: line.draw.drawnAt },
    ]);
  });

  it('makes one event of each order a batch placed on a SKU, in arrival order, with the totals after each', async () => {
    const sku = await createSku(10, 1, { lowStockThreshold: 5 });
    const { skuId, seg } = await firstSegment(sku);
    // Three orders in one batch statement, as the batcher writes them: one, two reserved for a minute, three.
    const fields = { idempotencyKey: null, requestFingerprint: null, customerId: null, limitedSkuIds: [] };
    const orders = [1, 2, 3].map((quantity) => ({
      ...fields,
      orderId: crypto.randomUUID(),
      skuId,
      holdSeconds: quantity === 2 ? 60 : null,
      takes: [{ segment: 0, quantity }],
    }));
    const result = await writeBatch(svc.service.db, {
      segments: [
        {
          skuId,
          layoutVersion: seg.layout_version,
          segment: 0,
          availableSeen: Number(seg.available),
          fenceSeen: Number(seg.fence_token),
          fence: Number(seg.fence_token) + 1,
          limitClaimed: false,
        },
      ],
      orders,
    });
    expect(result.placed.size).toBe(3);

    const events = await eventsOf(sku, 5);
    expect(events.map((e) => e.type)).toEqual([
      'sku.created',
      'order.placed',
      'order.placed',
      'order.placed',
      'sku.low_stock',
    ]);
    const placed = events.filter((e) => e.type === 'order.placed');
    expect(placed.map((e) => e.data.order)).toEqual([
      { orderId: orders[0]!.orderId, status: 'confirmed', quantity: 1 },
      { orderId: orders[1]!.orderId, status: 'reserved', quantity: 2 },
      { orderId: orders[2]!.orderId, status: 'confirmed', quantity: 3 },
    ]);
    expect(placed.map(({ data: { available, reserved, sold } }) => [available, reserved, sold])).toEqual([
      [9, 0, 1],
      [7, 2, 1],
      [4, 2, 4],
    ]);
    // Derived from the order that crossed the threshold, and numbered right after it.
    expect(events[4].data).toMatchObject({ cause: { id: events[3].id, type: 'order.placed' }, lowStockThreshold: 5 });
    expect(events.map((e) => e.sequence)).toEqual([1, 2, 3, 4, 5]);
  });

  it('writes nothing for a refused cart or a fenced-out batch', async () => {
    const [a, b] = [await createSku(5, 1), await createSku(1, 1)];
    const refused = await post('/orders', {
      items: [
        { sku: a, quantity: 2 },
        { sku: b, quantity: 3 },
      ],
    });
    expect(refused.body.code).toBe('out_of_stock');
    // A batch whose fence the row refuses: nothing of it is written, its event neither.
    const { skuId, seg } = await firstSegment(a);
    const stale = { skuId, layoutVersion: seg.layout_version, segment: 0, availableSeen: 5, limitClaimed: false };
    const fields = { idempotencyKey: null, requestFingerprint: null, customerId: null, holdSeconds: null };
    const result = await writeBatch(svc.service.db, {
      segments: [{ ...stale, fenceSeen: seg.fence_token + 7, fence: seg.fence_token + 9 }],
      orders: [
        { ...fields, orderId: crypto.randomUUID(), skuId, takes: [{ segment: 0, quantity: 1 }], limitedSkuIds: [] },
      ],
    });
    expect(result.placed.size).toBe(0);
    expect((await post('/orders', { sku: b, quantity: 1 })).status).toBe(201);
    // Once b's order is in the feed, everything before it has been sequenced too.
    await eventsOf(b, 3);
    expect((await eventsOf(a, 1)).map((e) => e.type)).toEqual(['sku.created']);
    expect((await eventsOf(b, 3)).map((e) => e.type)).toEqual(['sku.created', 'order.placed', 'sku.sold_out']);
  });

  it('pages the feed by cursor and filters it by SKU and type; bad queries are 400', async () => {
    const sku = await createSku(20, 2);
    for (let i = 0; i < 5; i++) expect((await post('/orders', { sku, quantity: 1 })).status).toBe(201);
    const all = await eventsOf(sku, 6);
    const pages: string[] = [];
    let after = String(Number(all[0].id) - 1);
    for (let page = 0; page < 10; page++) {
      const answer = (await get(`/events?sku=${sku}&after=${after}&limit=2`)).body;
      pages.push(...answer.events.map((e: { id: string }) => e.id));
      if (answer.nextCursor === null) break;
      after = answer.nextCursor;
    }
    expect(pages).toEqual(all.map((e) => e.id));
    const placed = (await get(`/events?sku=${sku}&types=order.placed,sku.sold_out`)).body;
    expect(placed.events.map((e: { type: string }) => e.type)).toEqual(Array(5).fill('order.placed'));
    expect(placed.nextCursor).toBeNull();

    for (const query of ['limit=1001', 'types=order.shipped', 'after=abc', 'after=-1', 'sku=%20', 'unknown=1']) {
      const answer = await get(`/events?${query}`);
      expect(answer.status, query).toBe(400);
      expect(answer.body.code, query).toBe('bad_request');
    }
  });

  it('streams events as server-sent events and resumes after Last-Event-ID', async () => {
    const sku = await createSku(10, 1);
    for (let i = 0; i < 3; i++) expect((await post('/orders', { sku, quantity: 1 })).status).toBe(201);
    const events = await eventsOf(sku, 4);
    const read = async (headers: Record<string, string>, count: number) => {
      const response = await fetch(`${svc.url}/events/stream?sku=${sku}`, { headers: { ...admin, ...headers } });
      expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const reader = response.body!.getReader();
      let text = '';
      while ((text.match(/\n\n/g) ?? []).length < count) text += new TextDecoder().decode((await reader.read()).value);
      await reader.cancel();
      return text
        .split('\n\n')
        .filter((block) => block.startsWith('id: '))
        .map((block) => ({ id: block.split('\n')[0]!.slice(4), event: JSON.parse(block.split('\n')[2]!.slice(6)) }));
    };
    const first = await read({}, 2);
    expect(first[0]).toEqual({ id: events[0].id, event: events[0] });
    const resumed = await read({ 'last-event-id': first[1]!.id }, 2);
    expect(resumed.map((e) => e.id)).toEqual([events[2].id, events[3].id]);
    expect((await get(`/events/stream?after=x`)).status).toBe(400);
  });

  it('registers webhooks, shows the secret once, delivers signed events, replays; bad input changes nothing', async () => {
    const receiver = new EventReceiver();
    await receiver.open();
    try {
      const before = (await get('/webhooks')).body.webhooks.length;
      for (const body of [
        { url: 'http://example.com/hook', types: ['order.placed'] },
        { url: receiver.url, types: ['order.shipped'] },
        { url: receiver.url, types: [] },
        { url: 'ftp://127.0.0.1/x', types: ['order.placed'] },
        { url: receiver.url, types: ['order.placed'], extra: 1 },
      ]) {
        const refused = await post('/webhooks', body);
        expect(refused.status, JSON.stringify(body)).toBe(400);
        expect(refused.body.code).toBe('bad_request');
      }
      expect((await get('/webhooks')).body.webhooks).toHaveLength(before);

      const sku = await createSku(10, 2);
      const created = await post('/webhooks', {
        url: receiver.url,
        types: ['order.placed', 'sku.sold_out'],
        skus: [sku],
      });
      expect(created.status).toBe(201);
      expect(created.body.secret).toMatch(/^whsec_/);
      receiver.secret = created.body.secret;
      const id = created.body.id as string;
      expect(created.headers.get('location')).toBe(`/webhooks/${id}`);
      const shown = (await get(`/webhooks/${id}`)).body;
      expect(shown).toMatchObject({ id, url: receiver.url, types: ['order.placed', 'sku.sold_out'], skus: [sku] });
      expect(shown.secret).toBeUndefined();
      expect(JSON.stringify((await get('/webhooks')).body)).not.toContain(created.body.secret);

      for (let i = 0; i < 2; i++) expect((await post('/orders', { sku, quantity: 5 })).status).toBe(201);
      expect(await waitFor(() => receiver.received.length >= 3, 10_000)).toBeLessThan(Infinity);
      const events = await eventsOf(sku, 4);
      expect(receiver.received.map((r) => r.event.data)).toEqual(events.filter((e) => e.type !== 'sku.created'));
      for (const r of receiver.received) {
        expect(r.verified).toBe(true);
        expect(r.id).toBe(r.event.data.id);
        expect(r.event).toMatchObject({ type: r.event.data.type, timestamp: r.event.data.occurredAt });
      }
      // A tampered body or a timestamp older than the library's tolerance fails verification.
      const r = receiver.received[0]!;
      const headers = { 'webhook-id': r.id, 'webhook-timestamp': r.timestamp, 'webhook-signature': r.signature };
      const wh = new Webhook(created.body.secret);
      expect(() => wh.verify(r.body.replace('"quantity":5', '"quantity":6'), headers)).toThrow();
      expect(() => wh.verify(r.body, { ...headers, 'webhook-timestamp': String(Number(r.timestamp) - 600) })).toThrow();

      const deliveries = (await get(`/webhooks/${id}/deliveries`)).body.deliveries;
      expect(deliveries).toHaveLength(3);
      expect(deliveries.every((d: { outcome: string }) => d.outcome === 'delivered')).toBe(true);

      // Failing deliveries are retried and recorded; once the receiver is back, delivered in order.
      receiver.mode = 'fail';
      expect((await post(`/skus/${sku}/restock`, { quantity: 1 })).status).toBe(200);
      expect((await post('/orders', { sku, quantity: 1 })).status).toBe(201);
      expect(await waitFor(() => receiver.received.length >= 6, 10_000)).toBeLessThan(Infinity);
      receiver.mode = 'ok';
      const placedId = (await eventsOf(sku, 7)).at(-1).id;
      expect(
        await waitFor(() => receiver.received.at(-1)!.id === placedId && receiver.mode === 'ok', 10_000),
      ).toBeLessThan(Infinity);
      expect(
        await waitFor(async () => (await get(`/webhooks/${id}`)).body.deliveredThrough >= placedId, 10_000),
      ).toBeLessThan(Infinity);
      const attempts = (await get(`/webhooks/${id}/deliveries`)).body.deliveries;
      expect(attempts[0]).toMatchObject({ eventId: placedId, outcome: 'delivered' });
      expect(
        attempts.some(
          (d: { outcome: string; responseStatus: number }) => d.outcome === 'retrying' && d.responseStatus === 500,
        ),
      ).toBe(true);

      // Replay: everything after the cursor again, in order.
      const count = receiver.received.length;
      expect((await post(`/webhooks/${id}/replay`, { after: '0' })).status).toBe(200);
      expect(await waitFor(() => receiver.received.length >= count + 5, 10_000)).toBeLessThan(Infinity);
      expect(receiver.received.slice(count, count + 5).map((x) => x.event.data.id)).toEqual(
        (await eventsOf(sku, 7))
          .filter((e) => e.type !== 'sku.created' && e.type !== 'sku.restocked' && e.type !== 'sku.back_in_stock')
          .map((e) => e.id),
      );
      expect((await post(`/webhooks/${id}/replay`, { after: 'x' })).status).toBe(400);

      const patched = await call(svc.url, 'PATCH', `/webhooks/${id}`, { enabled: false, skus: null }, admin);
      expect(patched.body).toMatchObject({ enabled: false, skus: null });
      expect((await call(svc.url, 'PATCH', `/webhooks/${id}`, { url: 'http://10.0.0.1/x' }, admin)).status).toBe(400);
      expect((await call(svc.url, 'DELETE', `/webhooks/${id}`, undefined, admin)).status).toBe(204);
      expect((await get(`/webhooks/${id}`)).body.code).toBe('webhook_not_found');
      expect((await get(`/webhooks/not-a-uuid`)).status).toBe(400);
    } finally {
      await receiver.close();
    }
  });
});
