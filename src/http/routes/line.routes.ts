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
import type { StreamGate, StreamOutlet } from '../stream-gate.js';
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
 * The open ticket streams of this instance, opened through the stream gate (its per-caller cap and buffer bound, as
 * the event streams). One timer reads every watched ticket in one query each 250 ms and writes a `ticket` event to
 * each stream whose ticket changed; a stream ends once its ticket's status is final. A reader that falls behind is
 * cut with `stream.closed` and reads the ticket again: a ticket stream has no history to resume.
 */
export class TicketStreams {
  private readonly watching = new Map<StreamOutlet, { ticket: TicketView; sent: string }>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly lines: Lines,
    private readonly gate: StreamGate,
  ) {}

  async serve(req: Request, res: Response, first: TicketView): Promise<void> {
    const outlet = this.gate.open('tickets', req, res);
    const sent = send(outlet, first);
    if (FINAL_STATUSES.has(first.status) || sent === undefined) return outlet.end();
    this.watching.set(outlet, { ticket: first, sent });
    this.timer ??= setInterval(() => void this.poll(), STREAM_POLL_MS);
    const gone = new AbortController();
    req.on('close', () => gone.abort());
    res.on('close', () => gone.abort());
    while (!gone.signal.aborted && this.watching.has(outlet)) {
      await sleep(HEARTBEAT_MS, undefined, { signal: gone.signal }).catch(() => undefined);
      if (this.watching.has(outlet) && !gone.signal.aborted && !outlet.send(': still here\n\n')) break;
    }
    this.forget(outlet);
    outlet.end();
  }

  /** Ends every stream, so that shutdown does not wait for watchers to leave. */
  close(): void {
    for (const outlet of this.watching.keys()) outlet.end();
    this.watching.clear();
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private async poll(): Promise<void> {
    const ids = [...new Set([...this.watching.values()].map((w) => w.ticket.ticketId))];
    const views = await this.lines.tickets(ids).catch(() => undefined);
    if (!views) return;
    for (const [outlet, watch] of this.watching) {
      const view = views.get(watch.ticket.ticketId);
      if (!view) continue;
      if (JSON.stringify(view) !== watch.sent) {
        const sent = send(outlet, view);
        if (sent === undefined) {
          this.forget(outlet);
          continue;
        }
        watch.sent = sent;
      }
      if (FINAL_STATUSES.has(view.status)) {
        this.forget(outlet);
        outlet.end();
      }
    }
  }

  private forget(outlet: StreamOutlet): void {
    this.watching.delete(outlet);
    if (this.watching.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}

/** Writes the ticket as one event; answers the text written, or undefined once the stream is closed. */
function send(outlet: StreamOutlet, ticket: TicketView): string | undefined {
  const text = JSON.stringify(ticket);
  return outlet.send(`event: ticket\ndata: ${text}\n\n`) ? text : undefined;
}

const skuOf = (req: Request) => parseOr400(skuName, req.params.sku, 'sku');
