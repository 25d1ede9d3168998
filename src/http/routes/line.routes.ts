import { setTimeout as sleep } from 'node:timers/promises';
import { type Request, type RequestHandler, type Response, Router } from 'express';
import { AppError } from '../../errors.js';
import type { Lines } from '../../lines/lines.js';
import { FINAL_STATUSES, type TicketView } from '../../lines/ticket-view.js';
import type { Access } from '../auth/access.js';
import { actingFor, boundCustomer } from '../auth/principal.js';
import { jsonBody } from '../json-body.js';
import { methodNotAllowed } from '../method-not-allowed.js';
import { joinLineBody, lineSettingsBody, skuName, ticketId } from '../schemas.js';
import { parseOr400 } from '../validate.js';

/** How often an instance reads the tickets its open streams watch: all of them in one query. */
const STREAM_POLL_MS = 250;
/** How long an admission holds its reservation unless the line says otherwise: two minutes to pay. */
const DEFAULT_HOLD_SECONDS = 120;
/** A comment line this often keeps proxies from closing an idle stream. */
const HEARTBEAT_MS = 15_000;

/**
 * A SKU's waiting line, under `/skus/:sku/line`: `PUT` gives the SKU a line or changes it (stock:admin), `GET` reads
 * it (any credential), `POST` joins it (orders:place; a customer token joins as its own customer). Rate limited per
 * caller as orders are: a join counts as an order. Without customer tokens a named customerId is only a claim, so
 * invented customers can take a line's places; `requireCustomerToken` lets only a customer token join.
 */
export function lineRoutes(
  lines: Lines,
  access: Access,
  options: { maxOrderQuantity: number; requireCustomerToken: boolean; limitOrders: RequestHandler | undefined },
): Router {
  const router = Router({ mergeParams: true });
  const join = joinLineBody(options.maxOrderQuantity);
  const limitOrders = options.limitOrders ? [options.limitOrders] : [];
  router
    .route('/')
    .get(access.require('credential', { openUntilKeys: true }), async (req, res) => {
      res.json(await lines.line(skuOf(req)));
    })
    .put(access.require(['stock:admin']), jsonBody, async (req, res) => {
      const sku = skuOf(req);
      const { capacity, holdSeconds = DEFAULT_HOLD_SECONDS } = parseOr400(lineSettingsBody, req.body, 'body');
      res.json(await lines.configure(sku, { capacity, holdSeconds }));
    })
    .post(access.require(['orders:place'], { openUntilKeys: true }), jsonBody, ...limitOrders, async (req, res) => {
      const sku = skuOf(req);
      const { customerId: named, quantity = 1 } = parseOr400(join, req.body ?? {}, 'body');
      const principal = access.principalOf(res);
      if (options.requireCustomerToken && principal.kind !== 'customer') {
        throw new AppError('forbidden', 'joining this line needs a customer token', { scope: 'orders:place' });
      }
      const customerId = actingFor(principal, named, 'orders:place');
      if (customerId === undefined) {
        throw new AppError('customer_required', 'a line holds one ticket per customer: name the customerId');
      }
      const { ticket, created } = await lines.join(sku, customerId, quantity);
      res.location(`/line-tickets/${ticket.ticketId}`);
      res.status(created ? 201 : 200).json(ticket);
    })
    .all(methodNotAllowed('GET', 'PUT', 'POST'));
  return router;
}

/** `/line-tickets/:id`: a ticket's state; `/line-tickets/:id/stream`: the same as server-sent events on every change. */
export function ticketRoutes(lines: Lines, streams: TicketStreams, access: Access): Router {
  const router = Router();
  const mayRead = access.require(['orders:read'], { openUntilKeys: true });
  router
    .route('/:id')
    .get(mayRead, async (req, res) => {
      const id = parseOr400(ticketId, req.params.id, 'id');
      res.json(await lines.ticket(id, boundCustomer(access.principalOf(res))));
    })
    .all(methodNotAllowed('GET'));
  router
    .route('/:id/stream')
    .get(mayRead, async (req, res) => {
      const id = parseOr400(ticketId, req.params.id, 'id');
      // Unknown, or another customer's: 404 before the stream opens.
      const first = await lines.ticket(id, boundCustomer(access.principalOf(res)));
      await streams.serve(req, res, first);
    })
    .all(methodNotAllowed('GET'));
  return router;
}

/**
 * The open ticket streams of this instance. One timer reads every watched ticket in one query each 250 ms and writes
 * a `ticket` event to each stream whose ticket changed; a stream ends once its ticket's status is final.
 */
export class TicketStreams {
  private readonly watching = new Map<Response, { ticket: TicketView; sent: string }>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly lines: Lines) {}

  async serve(req: Request, res: Response, first: TicketView): Promise<void> {
    res
      .status(200)
      .set({ 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store', 'X-Accel-Buffering': 'no' });
    res.flushHeaders();
    const sent = send(res, first);
    if (FINAL_STATUSES.has(first.status)) return void res.end();
    this.watching.set(res, { ticket: first, sent });
    this.timer ??= setInterval(() => void this.poll(), STREAM_POLL_MS);
    const gone = new AbortController();
    req.on('close', () => gone.abort());
    res.on('close', () => gone.abort());
    while (!gone.signal.aborted && this.watching.has(res)) {
      await sleep(HEARTBEAT_MS, undefined, { signal: gone.signal }).catch(() => undefined);
      if (this.watching.has(res) && !gone.signal.aborted) res.write(': still here\n\n');
    }
    this.forget(res);
    res.end();
  }

  /** Ends every stream, so that shutdown does not wait for watchers to leave. */
  close(): void {
    for (const res of this.watching.keys()) res.end();
    this.watching.clear();
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private async poll(): Promise<void> {
    const ids = [...new Set([...this.watching.values()].map((w) => w.ticket.ticketId))];
    const views = await this.lines.tickets(ids).catch(() => undefined);
    if (!views) return;
    for (const [res, watch] of this.watching) {
      const view = views.get(watch.ticket.ticketId);
      if (!view) continue;
      const text = JSON.stringify(view);
      if (text !== watch.sent) watch.sent = send(res, view);
      if (FINAL_STATUSES.has(view.status)) {
        this.forget(res);
        res.end();
      }
    }
  }

  private forget(res: Response): void {
    this.watching.delete(res);
    if (this.watching.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}

/** Writes the ticket as one event; answers the text written, to tell the next change from it. */
function send(res: Response, ticket: TicketView): string {
  const text = JSON.stringify(ticket);
  res.write(`event: ticket\ndata: ${text}\n\n`);
  return text;
}

const skuOf = (req: Request) => parseOr400(skuName, req.params.sku, 'sku');
