import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditSku, booksViolations } from '../support/invariants.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

const iso = (ms: number) => new Date(ms).toISOString();

describe('waiting lines', () => {
  let own: OwnDatabase;
  let svc: RunningService;
  beforeAll(async () => {
    // A database of its own, dropped at the end: the lines these tests leave waiting would otherwise go on admitting
    // tickets, on whatever instance later test files start, for as long as their holds keep expiring.
    own = await createOwnDatabase('lines');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    svc = await startService({ DATABASE_URL: own.url });
  });
  afterAll(async () => {
    await svc?.stop();
    await own?.drop();
  });

  /** A SKU of `stock` units with a line; its sale opens `opensInMs` from now (none: open already). */
  async function linedSku(stock: number, line: Record<string, unknown>, opensInMs?: number) {
    const sku = uniqueSku('line');
    const window = opensInMs === undefined ? {} : { saleStartsAt: iso(Date.now() + opensInMs) };
    expect((await call(svc.url, 'POST', '/skus', { sku, stock, segments: 4, ...window })).status).toBe(201);
    const put = await call(svc.url, 'PUT', `/skus/${sku}/line`, { capacity: 1000, ...line });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    return sku;
  }
  const join = (sku: string, customerId: string, quantity = 1) =>
    call(svc.url, 'POST', `/skus/${sku}/line`, { customerId, quantity });
  const ticket = async (id: string) => (await call(svc.url, 'GET', `/line-tickets/${id}`)).body;

  it('sells a SKU with a line only through it: a direct order is refused and changes nothing', async () => {
    const sku = await linedSku(5, {});
    const refused = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('line_required');
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ available: 5, reserved: 0, sold: 0 });
  });

  it('gives one ticket per customer: joining again answers the same ticket', async () => {
    const sku = await linedSku(5, {}, 60_000);
    const first = await join(sku, 'ann');
    expect(first.status).toBe(201);
    expect(first.headers.get('location')).toBe(`/line-tickets/${first.body.ticketId}`);
    expect(first.body).toMatchObject({ sku, customerId: 'ann', status: 'waiting', preLine: true, position: null });
    const again = await join(sku, 'ann');
    expect(again.status).toBe(200);
    expect(again.body.ticketId).toBe(first.body.ticketId);
    expect((await call(svc.url, 'GET', `/skus/${sku}/line`)).body).toMatchObject({ tickets: 1, status: 'forming' });
  });

  it('gives one ticket per customer when the same customers join through two instances at once', async () => {
    const other = await startService({ DATABASE_URL: own.url });
    try {
      const sku = await linedSku(5, {}, 60_000);
      const customers = Array.from({ length: 200 }, (_, i) => `twice-${i}`);
      const through = (url: string) =>
        Promise.all(customers.map((customerId) => call(url, 'POST', `/skus/${sku}/line`, { customerId })));
      const [here, there] = await Promise.all([through(svc.url), through(other.url)]);
      expect([...here, ...there].map((j) => j.status).filter((status) => status !== 200 && status !== 201)).toEqual([]);
      // Each customer's two joins answer one ticket, made by exactly one of them.
      expect(customers.filter((_, i) => here[i]!.body.ticketId !== there[i]!.body.ticketId)).toEqual([]);
      expect(customers.filter((_, i) => here[i]!.status + there[i]!.status !== 401)).toEqual([]);
      expect((await call(svc.url, 'GET', `/skus/${sku}/line`)).body).toMatchObject({ tickets: 200 });
    } finally {
      await other.stop();
    }
  });

  it('draws the pre-line at the opening with a recorded seed that orders it, and queues later joins behind it', async () => {
    const sku = await linedSku(100, {}, 1_500);
    const early = await Promise.all(Array.from({ length: 30 }, (_, i) => join(sku, `early-${i}`)));
    expect(early.every((j) => j.status === 201 && j.body.preLine)).toBe(true);
    await waitFor(async () => (await call(svc.url, 'GET', `/skus/${sku}/line`)).body.status === 'open', 5_000);
    const late: { preLine: boolean; position: number }[] = [];
    for (let i = 0; i < 5; i++) late.push((await join(sku, `late-${i}`)).body);
    const line = (await call(svc.url, 'GET', `/skus/${sku}/line`)).body;
    expect(line.draw.preLineTickets).toBe(30);
    expect(line.draw.seed).toMatch(/^[0-9a-f]{64}$/);
    // Anyone holding the tickets' ids repeats the draw from the seed.
    const drawn = await Promise.all(early.map((j) => ticket(j.body.ticketId)));
    const byDigest = [...drawn].sort((a, b) =>
      digest(line.draw.seed + a.ticketId).compare(digest(line.draw.seed + b.ticketId)),
    );
    expect(byDigest.map((t) => t.position)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect(late.map((t) => [t.preLine, t.position])).toEqual(Array.from({ length: 5 }, (_, i) => [false, 31 + i]));
  });

  it('admits in line order as stock allows, and tells everyone else sold out once the last unit is confirmed', async () => {
    const sku = await linedSku(5, { holdSeconds: 60 });
    const tickets: string[] = [];
    for (let i = 0; i < 12; i++) tickets.push((await join(sku, `c-${i}`)).body.ticketId as string);
    await waitFor(async () => (await ticket(tickets[4]!)).status === 'admitted', 5_000);
    const views = await Promise.all(tickets.map(ticket));
    expect(views.map((v) => v.status)).toEqual([...Array(5).fill('admitted'), ...Array(7).fill('waiting')]);
    expect(views[5]).toMatchObject({ position: 6, ahead: 0, unitsAhead: 0 });
    expect(views[11]).toMatchObject({ position: 12, ahead: 6, unitsAhead: 6 });
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ available: 0, reserved: 5 });
    for (const view of views.slice(0, 5)) {
      expect((await call(svc.url, 'POST', `/orders/${view.reservation.orderId}/confirm`)).status).toBe(200);
    }
    const confirmedAt = Date.now();
    await waitFor(async () => (await ticket(tickets[11]!)).status === 'sold_out', 5_000);
    expect(Date.now() - confirmedAt).toBeLessThan(1_000);
    expect((await Promise.all(tickets.map(ticket))).map((v) => v.status)).toEqual([
      ...Array(5).fill('purchased'),
      ...Array(7).fill('sold_out'),
    ]);
    const late = await join(sku, 'too-late');
    expect(late.body.code, JSON.stringify(late.body)).toBe('line_closed');
  });

  it('opens a sold-out line again when its SKU gets units back: those told sold out stay so, new joiners buy', async () => {
    const sku = await linedSku(1, { holdSeconds: 60 });
    const first = (await join(sku, 'r-0')).body.ticketId as string;
    const told = (await join(sku, 'r-1')).body.ticketId as string;
    await waitFor(async () => (await ticket(first)).status === 'admitted', 5_000);
    const { reservation } = await ticket(first);
    expect((await call(svc.url, 'POST', `/orders/${reservation.orderId}/confirm`)).status).toBe(200);
    await waitFor(async () => (await ticket(told)).status === 'sold_out', 5_000);
    expect((await join(sku, 'r-2')).body.code).toBe('line_closed');

    expect((await call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 2 })).status).toBe(200);
    const lineOpen = async () => (await call(svc.url, 'GET', `/skus/${sku}/line`)).body.status === 'open';
    expect(await waitFor(lineOpen, 5_000)).toBeLessThan(Infinity);
    expect((await ticket(told)).status).toBe('sold_out');
    const next = await join(sku, 'r-2');
    expect(next.status, JSON.stringify(next.body)).toBe(201);
    const admitted = async () => (await ticket(next.body.ticketId as string)).status === 'admitted';
    expect(await waitFor(admitted, 5_000)).toBeLessThan(Infinity);
    const second = await ticket(next.body.ticketId as string);
    expect((await call(svc.url, 'POST', `/orders/${second.reservation.orderId}/confirm`)).status).toBe(200);
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ available: 1, reserved: 0, sold: 2 });
    expect(booksViolations(await auditSku(own.db, sku))).toEqual([]);
  });

  it('admits the next ticket when an admission is cancelled or runs out', async () => {
    const sku = await linedSku(1, { holdSeconds: 1 });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await join(sku, `x-${i}`)).body.ticketId as string);
    await waitFor(async () => (await ticket(ids[0]!)).status === 'admitted', 5_000);
    const first = await ticket(ids[0]!);
    expect((await call(svc.url, 'POST', `/orders/${first.reservation.orderId}/cancel`)).status).toBe(200);
    await waitFor(async () => (await ticket(ids[1]!)).status === 'admitted', 5_000);
    expect((await ticket(ids[0]!)).status).toBe('cancelled');
    // The second admission's hold runs out after a second: the third ticket's turn.
    await waitFor(async () => (await ticket(ids[2]!)).status === 'admitted', 10_000);
    expect((await ticket(ids[1]!)).status).toBe('expired');
  });

  it('keeps a ticket that asks for more than is left waiting, rather than letting a smaller one pass it', async () => {
    const sku = await linedSku(3, { holdSeconds: 60 });
    const a = (await join(sku, 'a', 2)).body.ticketId;
    const b = (await join(sku, 'b', 2)).body.ticketId;
    const c = (await join(sku, 'c', 1)).body.ticketId;
    await waitFor(async () => (await ticket(a)).status === 'admitted', 5_000);
    // One unit is left, which c could take; b, in front of it, needs two. Once a gives its two back, b and c both fit.
    expect((await call(svc.url, 'POST', `/orders/${(await ticket(a)).reservation.orderId}/cancel`)).status).toBe(200);
    await waitFor(async () => (await ticket(c)).status === 'admitted', 5_000);
    await waitFor(async () => (await ticket(b)).status === 'admitted', 5_000);
    const { rows } = await sql<{ id: string; admitted_at: Date }>`
      select id, admitted_at from line_tickets where id in (${b}, ${c})`.execute(svc.service.db);
    const at = new Map(rows.map((row) => [row.id, row.admitted_at.getTime()]));
    expect(at.get(c)).toBeGreaterThanOrEqual(at.get(b)!);
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ available: 0, reserved: 3 });
  });

  it('refuses joins past its capacity with line_full, and still answers a customer with a ticket', async () => {
    const sku = await linedSku(5, { capacity: 2 }, 60_000);
    expect((await join(sku, 'p')).status).toBe(201);
    expect((await join(sku, 'q')).status).toBe(201);
    const full = await join(sku, 'r');
    expect(full.status).toBe(409);
    expect(full.body).toMatchObject({ code: 'line_full', capacity: 2 });
    expect((await join(sku, 'p')).status).toBe(200);
    expect((await call(svc.url, 'GET', `/skus/${sku}/line`)).body.tickets).toBe(2);
  });

  it('takes joins again once every ticket has ended, and sells the units they left to the next joiner', async () => {
    // A line full of customers who never buy: stock 3, capacity 5, and 100 joins at once before the opening.
    const sku = await linedSku(3, { capacity: 5, holdSeconds: 3 }, 1_000);
    const joins = await Promise.all(Array.from({ length: 100 }, (_, i) => join(sku, `bot-${i}`)));
    expect(joins.filter((j) => j.status === 201)).toHaveLength(5);
    expect(joins.filter((j) => j.body.code === 'line_full')).toHaveLength(95);
    const ids = joins.filter((j) => j.status === 201).map((j) => j.body.ticketId as string);
    const admitted = async () => (await Promise.all(ids.map(ticket))).filter((t) => t.status === 'admitted');
    await waitFor(async () => (await admitted()).length === 3, 5_000);
    const [bought, cancelled] = await admitted();
    expect((await call(svc.url, 'POST', `/orders/${bought.reservation.orderId}/confirm`)).status).toBe(200);
    expect((await call(svc.url, 'POST', `/orders/${cancelled.reservation.orderId}/cancel`)).status).toBe(200);
    // The other three admissions run out: the cancelled one's unit goes to the fourth ticket, and an expiry's to the
    // fifth; then every ticket has ended and two units are left.
    const ended = async () => (await Promise.all(ids.map(ticket))).map((t) => t.status).sort();
    await waitFor(
      async () =>
        JSON.stringify(await ended()) === JSON.stringify(['cancelled', 'expired', 'expired', 'expired', 'purchased']),
      15_000,
    );
    await waitFor(async () => (await call(svc.url, 'GET', `/skus/${sku}`)).body.available === 2, 5_000);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 1 })).body.code).toBe('line_required');
    // The line has room again: the next customer joins and is admitted to both units.
    const buyer = await join(sku, 'real-buyer', 2);
    expect(buyer.status, JSON.stringify(buyer.body)).toBe(201);
    await waitFor(async () => (await ticket(buyer.body.ticketId)).status === 'admitted', 5_000);
    const order = (await ticket(buyer.body.ticketId)).reservation.orderId;
    expect((await call(svc.url, 'POST', `/orders/${order}/confirm`)).status).toBe(200);
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ available: 0, sold: 3 });
    await waitFor(async () => (await call(svc.url, 'GET', `/skus/${sku}/line`)).body.status === 'sold_out', 5_000);
    expect(booksViolations(await auditSku(svc.service.db, sku))).toEqual([]);
  });

  it('holds capacity for tickets still waiting or admitted: a full line refuses joins while one is live', async () => {
    const sku = await linedSku(5, { capacity: 2, holdSeconds: 60 });
    const first = (await join(sku, 'live-1')).body.ticketId;
    expect((await join(sku, 'live-2')).status).toBe(201);
    await waitFor(async () => (await ticket(first)).status === 'admitted', 5_000);
    expect((await join(sku, 'live-3')).body.code).toBe('line_full');
    // Cancelled, the first ticket has ended: its place is free within a pass or two.
    expect((await call(svc.url, 'POST', `/orders/${(await ticket(first)).reservation.orderId}/cancel`)).status).toBe(
      200,
    );
    await waitFor(async () => (await join(sku, 'live-3')).status === 201, 5_000);
    expect((await join(sku, 'live-4')).body.code).toBe('line_full');
    expect((await call(svc.url, 'GET', `/skus/${sku}/line`)).body.tickets).toBe(3);
  });

  it('sends no order to a line whose sale window ended: the SKU is refused for its window', async () => {
    const sku = uniqueSku('ended');
    const window = { saleStartsAt: iso(Date.now() - 60_000), saleEndsAt: iso(Date.now() + 1_000) };
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 5, segments: 1, ...window })).status).toBe(201);
    expect((await call(svc.url, 'PUT', `/skus/${sku}/line`, { capacity: 10 })).status).toBe(200);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 1 })).body.code).toBe('line_required');
    await waitFor(async () => (await call(svc.url, 'GET', `/skus/${sku}/line`)).body.status === 'closed', 5_000);
    expect((await join(sku, 'after-the-end')).body.code).toBe('line_closed');
    const refused = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('not_on_sale');
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ available: 5, reserved: 0 });
  });

  it('answers bad joins with a 4xx and changes nothing', async () => {
    const sku = await linedSku(5, {}, 60_000);
    const plain = uniqueSku('plain');
    await call(svc.url, 'POST', '/skus', { sku: plain, stock: 5, segments: 1 });
    expect((await call(svc.url, 'POST', `/skus/${sku}/line`, {})).body.code).toBe('customer_required');
    expect((await join(sku, 'z', 0)).status).toBe(400);
    expect((await call(svc.url, 'POST', `/skus/${sku}/line`, { customerId: 'z', extra: 1 })).status).toBe(400);
    expect((await join(plain, 'z')).body.code).toBe('line_not_found');
    expect((await join('no-such-sku-at-all', 'z')).body.code).toBe('sku_not_found');
    expect((await call(svc.url, 'GET', `/line-tickets/${crypto.randomUUID()}`)).body.code).toBe('ticket_not_found');
    expect((await call(svc.url, 'GET', '/line-tickets/not-a-uuid')).status).toBe(400);
    expect((await call(svc.url, 'PUT', `/skus/${sku}/line`, { capacity: 0 })).status).toBe(400);
    expect((await call(svc.url, 'GET', `/skus/${sku}/line`)).body.tickets).toBe(0);
  });

  it('streams a ticket as it moves from waiting to admitted', async () => {
    const sku = await linedSku(1, { holdSeconds: 60 }, 800);
    const id = (await join(sku, 'streamer')).body.ticketId;
    const response = await fetch(`${svc.url}/line-tickets/${id}/stream`);
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    const reader = response.body!.getReader();
    const statuses: string[] = [];
    let text = '';
    while (!statuses.includes('admitted')) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
      for (const match of text.matchAll(/data: (.*)\n\n/g)) statuses.push(JSON.parse(match[1]!).status);
      text = text.slice(text.lastIndexOf('\n\n') + 2);
    }
    await reader.cancel();
    expect(statuses[0]).toBe('waiting');
    expect(statuses.at(-1)).toBe('admitted');
    const orderId = (await ticket(id)).reservation.orderId;
    const row = await sql<{ status: string }>`select status from orders where id = ${orderId}`.execute(svc.service.db);
    expect(row.rows[0]!.status).toBe('reserved');
  });
});

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}
