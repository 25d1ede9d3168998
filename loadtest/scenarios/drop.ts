// A drop: a crowd joins a line for 1,000 units at once: joins/s beside the bare echo, the line's order, sold-out time.
import type autocannon from 'autocannon';
import { sql } from 'kysely';
import pMap from 'p-map';
import type { LineView, TicketView } from '../../src/lines/ticket-view.js';
import { drawOrder } from '../../test/support/line-drop.js';
import { waitFor } from '../../test/support/wait-for.js';
import type { ServiceTarget } from '../infra/service-process.js';
import { measureCeiling } from './cases.js';
import type { RunContext } from './context.js';
import { SIXTEEN_AT_A_TIME } from './sales.js';

const UNITS = 1_000;
const SAMPLE = 1_000; // Waiting tickets whose status is read, during the reads round and once sold out.
/** Each join a customer of its own, as a drop's crowd is; `midway` is called once half the crowd has been sent. */
const crowd = (customers: number, midway = () => {}): autocannon.Request[] => {
  let sent = 0;
  const setupRequest = (r: autocannon.Request) => {
    if (++sent === customers / 2) midway();
    return { ...r, body: JSON.stringify({ customerId: `c${sent}` }) };
  };
  return [{ method: 'POST', setupRequest }];
};
type Ticket = { id: string; number: number; preLine: boolean; orderId: string | null };
const inOrder = (numbers: number[]) => numbers.every((n, i) => n === i + 1);

export async function runDrop(ctx: RunContext, echo: ServiceTarget, service: ServiceTarget, segments: number) {
  const api = ctx.api(service);
  const customers = ctx.settings.dropCustomers;
  const lined = async (label: string, capacity: number) => {
    const saleStartsAt = new Date(Date.now() + 86_400_000).toISOString();
    const sku = await ctx.createSku(service, label, UNITS, segments, { saleStartsAt });
    const path = `/skus/${encodeURIComponent(sku)}/line`;
    await api.call(200, 'PUT', path, { capacity, holdSeconds: 600 });
    return { sku, path };
  };
  const warm = { title: 'drop · joins', path: (await lined('drop-warm', 1e7)).path, requests: crowd(customers) };
  const warmup = await ctx.warmUp(service, warm);
  const bare = { id: 'drop-echo', label: 'bare express JSON echo beside the drop', path: '/orders', status: 201 };
  const echoed = await measureCeiling(ctx, { ...bare, service: echo });
  // The sale opens once half the crowd has joined: they form the pre-line, the rest queue behind it.
  const { sku, path } = await lined('drop', customers);
  let opening: Promise<unknown> | undefined;
  const requests = crowd(customers, () => (opening = api.updateSku(sku, { saleStartsAt: null })));
  const title = `drop · ${customers} customers join across ${service.pids.length} instances`;
  const burst = await ctx.round(service, { title, path, requests, amount: customers });
  await opening;
  const line = () => api.call<LineView>(200, 'GET', path);
  const query = sql<Ticket>`select t.id, t.number, t.pre_line as "preLine", t.order_id as "orderId"
    from line_tickets t join skus k on k.id = t.sku_id where k.sku = ${sku} order by t.number`;
  let tickets: Ticket[] = [];
  const admitted = () => tickets.filter((t) => t.orderId);
  const admitting = async () => {
    tickets = (await query.execute(ctx.backing.db)).rows;
    return admitted().length >= UNITS;
  };
  await waitFor(admitting, 120_000, 250);
  const { seed, preLineTickets } = (await line()).draw;
  const numberOf = new Map(tickets.filter((t) => t.preLine).map((t) => [t.id, t.number]));
  const drawn = drawOrder(seed!, [...numberOf.keys()]).map((id) => numberOf.get(id)!);
  const waiting = tickets.filter((t) => !t.orderId);
  const sample = Array.from({ length: SAMPLE }, (_, i) => waiting[Math.floor((i * waiting.length) / SAMPLE)]!.id);
  const pick = () => sample[Math.floor(Math.random() * SAMPLE)]!;
  const read = (r: autocannon.Request) => ({ ...r, path: `/line-tickets/${pick()}` });
  const status = { title: 'drop · GET /line-tickets/:id', method: 'GET' as const, path: '/line-tickets' };
  const reads = await ctx.round(service, { ...status, amount: 20 * SAMPLE, requests: [{ setupRequest: read }] }, 200);
  ctx.progress.note(`drop: confirming the ${UNITS} admitted orders, then waiting for every ticket to read sold out…`);
  await pMap(admitted(), (t) => api.confirm(t.orderId!), SIXTEEN_AT_A_TIME);
  // Every waiting ticket's status derives from the line's sold-out moment: the line reads it, the sample shows it.
  const soldOutMs = await waitFor(async () => (await line()).status === 'sold_out', 10_000, 5);
  const told = await pMap(sample, (id) => api.call<TicketView>(200, 'GET', `/line-tickets/${id}`), SIXTEEN_AT_A_TIME);
  const { sold, available, reserved } = await api.sku(sku);
  // What the report judges: nothing a join was answered 201 for is lost, the line is kept in order, all is told.
  const checks = {
    everyAnsweredJoinHasItsTicket: tickets.length >= (burst.statusCounts[201] ?? 0) && tickets.length <= customers,
    numberedOneToN: inOrder(tickets.map((t) => t.number)),
    preLineInItsDraw: drawn.length === preLineTickets && inOrder(drawn),
    firstNumbersAdmitted: admitted().length === UNITS && inOrder(admitted().map((t) => t.number)),
    allSold: sold === UNITS && available === 0 && reserved === 0,
    sampleToldSoldOut: told.every((v) => v.status === 'sold_out'),
  };
  return {
    id: 'drop',
    label: title,
    customers,
    tickets: tickets.length,
    preLine: drawn.length,
    checks,
    soldOutMs,
    reads,
    warmup,
    measured: burst,
    perSecond: burst.ratePerSecond[201] ?? 0,
    echo: echoed,
  };
}
