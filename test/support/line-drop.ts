import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { OrderStatus } from './history.js';
import type { SeenReservation } from './line-history.js';

// A drop as its customers live it, over HTTP: they join a SKU's line (joinLine), the admitted ones confirm, cancel or
// let their reservation run out (LineCustomers), and some watch their ticket until it reads sold out (SoldOutWatch).
// Every request is kept with when it was sent and answered (epoch ms: the clock of every process on this machine).

const REQUEST_TIMEOUT_MS = 20_000;

interface Answer {
  status: number;
  sentAt: number;
  receivedAt: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a JSON answer, read by the checks
  body: any;
}

/** One request; status 0 when no answer came (connection refused or reset, timeout). */
async function request(url: string, method: string, body?: unknown): Promise<Answer> {
  const sentAt = Date.now();
  try {
    const response = await fetch(url, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = text;
    }
    return { status: response.status, sentAt, receivedAt: Date.now(), body: parsed };
  } catch {
    return { status: 0, sentAt, receivedAt: Date.now(), body: undefined };
  }
}

/** Runs `work` over `items` with at most `concurrency` at a time. */
export async function inParallel<T>(items: readonly T[], concurrency: number, work: (item: T) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) await work(items[next++]!);
    }),
  );
}

/** What a join was answered with. */
export interface JoinAttempt {
  target: string;
  sentAt: number;
  receivedAt: number;
  status: number;
  code?: string;
  ticketId?: string;
  preLine?: boolean;
  position?: number | null;
}

/** One customer's join, retried on 503 or a lost answer (joining again is safe: it answers the same ticket). */
export interface Join {
  customerId: string;
  quantity: number;
  attempts: JoinAttempt[];
  /** The ticket the first 201/200 named; undefined when none came. */
  ticketId?: string;
  preLine?: boolean;
}

export interface JoinOptions {
  targets: () => string[];
  concurrency: number;
  /** How long one join is retried after a 503 or no answer. */
  retryBudgetMs: number;
  /** Joins started per second at most (none: as fast as `concurrency` allows). */
  perSecond?: number;
}

let targetTurn = 0;
/** The members in turn: the load spread over the fleet, as a balancer would. */
const pick = (targets: () => string[]) => {
  const urls = targets();
  return urls[targetTurn++ % urls.length]!;
};

/** Joins the SKU's line for each customer; answers every customer's join as it ended. */
export async function joinLine(
  sku: string,
  customers: readonly { customerId: string; quantity: number }[],
  options: JoinOptions,
): Promise<Join[]> {
  const joins: Join[] = customers.map((c) => ({ ...c, attempts: [] }));
  const started = Date.now();
  let begun = 0;
  await inParallel(joins, options.concurrency, async (join) => {
    if (options.perSecond !== undefined) {
      const due = started + (begun++ * 1000) / options.perSecond;
      if (due > Date.now()) await sleep(due - Date.now());
    }
    const deadline = Date.now() + options.retryBudgetMs;
    for (;;) {
      const target = pick(options.targets);
      const answer = await request(`${target}/skus/${sku}/line`, 'POST', {
        customerId: join.customerId,
        quantity: join.quantity,
      });
      const { body } = answer;
      join.attempts.push({
        target,
        sentAt: answer.sentAt,
        receivedAt: answer.receivedAt,
        status: answer.status,
        code: body?.code,
        ticketId: body?.ticketId,
        preLine: body?.preLine,
        position: body?.position,
      });
      if (answer.status === 201 || answer.status === 200) {
        join.ticketId = body.ticketId;
        join.preLine = body.preLine;
        return;
      }
      if ((answer.status !== 0 && answer.status !== 503) || Date.now() > deadline) return;
      await sleep(100);
    }
  });
  return joins;
}

/** The pre-line's order as anyone can recompute it: its tickets by SHA-256 of the draw's seed and the ticket's id. */
export function drawOrder(seed: string, ticketIds: readonly string[]): string[] {
  const digest = (id: string) =>
    createHash('sha256')
      .update(seed + id)
      .digest();
  const keyed = ticketIds.map((id) => ({ id, key: digest(id) }));
  return keyed.sort((a, b) => a.key.compare(b.key)).map((t) => t.id);
}

export type Behaviour = 'confirm' | 'cancel' | 'lapse';

/** What a customer did with its admission, and what the service answered. */
export interface CustomerAction {
  ticketId: string;
  position: number;
  orderId: string;
  behaviour: Exclude<Behaviour, 'lapse'>;
  sentAt: number;
  receivedAt: number;
  status: number;
  code?: string;
  /** The order's status in the answer (a 409's `orderStatus`): a cancel after the hold ran out answers it expired. */
  orderStatus?: OrderStatus;
}

/** Ticket statuses after which its customer has nothing left to do. */
const SETTLED = new Set(['purchased', 'expired', 'cancelled', 'sold_out', 'closed', 'refused']);

/**
 * The admitted customers of one line, over HTTP. Every 100 ms it reads the line (`admittedThrough`), reads each ticket
 * let through and not settled yet, and acts on each one admitted: confirms, cancels or does nothing (lets the hold
 * run out), as `behaviour` says for its place in line. Tickets are found by position: the post-opening ones from
 * their join's answer, the pre-line's by recomputing the draw from the line's seed. A failed action (503, no answer)
 * is tried again on the next round: confirming or cancelling twice is a no-op.
 */
export class LineCustomers {
  readonly actions: CustomerAction[] = [];
  /** Each admission's reservation, as a read of its ticket first named it. */
  readonly reservations = new Map<string, SeenReservation>();
  /** Ticket reads that failed (503, no answer). */
  failedReads = 0;
  /** What kept the customers from finding their places. */
  readonly problems: string[] = [];
  private readonly byPosition = new Map<number, string>();
  private readonly settled = new Set<string>();
  private running = true;
  private done: Promise<void> | undefined;

  constructor(
    private readonly sku: string,
    private readonly options: {
      targets: () => string[];
      behaviour: (position: number) => Behaviour;
      /** Actions per round at most: customers who take their time spread admissions out. */
      actionsPerRound?: number;
    },
  ) {}

  /** Knows the tickets: `joins` (all of them, pre-line and after). */
  start(joins: () => readonly Join[]): this {
    this.done = this.run(joins);
    return this;
  }

  /** Stops after the round under way; resolves when it ended. */
  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }

  private async run(joins: () => readonly Join[]): Promise<void> {
    let seed: string | null = null;
    while (this.running) {
      const line = await request(`${pick(this.options.targets)}/skus/${this.sku}/line`, 'GET');
      if (line.status === 200 && line.body.draw.seed !== null) {
        if (seed === null) {
          seed = line.body.draw.seed as string;
          const preLine = [...new Set(joins().flatMap((j) => (j.preLine && j.ticketId ? [j.ticketId] : [])))];
          // Customers who know only their own tickets can place the pre-line only if they hold all of it.
          if (preLine.length !== line.body.draw.preLineTickets) {
            this.problems.push(
              `${preLine.length} pre-line tickets known, the line drew ${line.body.draw.preLineTickets}`,
            );
          }
          drawOrder(seed, preLine).forEach((id, i) => this.byPosition.set(i + 1, id));
        }
        for (const join of joins()) {
          const position = join.attempts.find((a) => a.ticketId && a.position)?.position;
          if (position) this.byPosition.set(position, join.ticketId!);
        }
        await this.round(line.body.admittedThrough as number);
      }
      await sleep(100);
    }
  }

  private async round(admittedThrough: number): Promise<void> {
    const due: [number, string][] = [];
    for (let position = 1; position <= admittedThrough; position++) {
      const ticketId = this.byPosition.get(position);
      if (ticketId && !this.settled.has(ticketId)) due.push([position, ticketId]);
    }
    let actionsLeft = this.options.actionsPerRound ?? Infinity;
    await inParallel(due, 32, async ([position, ticketId]) => {
      const read = await request(`${pick(this.options.targets)}/line-tickets/${ticketId}`, 'GET');
      if (read.status !== 200) return void this.failedReads++;
      this.saw(read);
      const status = read.body.status as string;
      if (SETTLED.has(status)) return void this.settled.add(ticketId);
      if (status !== 'admitted') return;
      const behaviour = this.options.behaviour(position);
      // Letting the hold run out takes nothing more from its customer.
      if (behaviour === 'lapse') return void this.settled.add(ticketId);
      if (actionsLeft-- <= 0) return;
      const orderId = read.body.reservation.orderId as string;
      const answer = await request(`${pick(this.options.targets)}/orders/${orderId}/${behaviour}`, 'POST');
      // Done, or too late (the hold ran out): either way nothing left to do; a 503 or no answer is tried again.
      if (answer.status === 200 || answer.status === 409) this.settled.add(ticketId);
      this.actions.push({
        ticketId,
        position,
        orderId,
        behaviour,
        sentAt: answer.sentAt,
        receivedAt: answer.receivedAt,
        status: answer.status,
        code: answer.body?.code,
        orderStatus: answer.status === 409 ? answer.body?.orderStatus : answer.body?.status,
      });
    });
  }

  /** Notes the reservation a ticket's answer names, the first time one names it. */
  saw(read: Answer): void {
    const reservation = read.body?.reservation as { orderId: string; expiresAt: string | null } | null | undefined;
    if (!reservation || this.reservations.has(reservation.orderId)) return;
    this.reservations.set(reservation.orderId, {
      orderId: reservation.orderId,
      quantity: read.body.quantity as number,
      expiresAt: reservation.expiresAt === null ? null : Date.parse(reservation.expiresAt),
      seenAt: read.receivedAt,
    });
  }

  /**
   * When the last unit's confirmation was asked for: the latest, over the orders confirmed, of the first time each
   * was asked (its confirmation committed after that), so the time from it to a sold-out reading is never understated.
   */
  lastConfirmationSentAt(): number {
    const first = new Map<string, number>();
    for (const a of this.actions) {
      if (a.behaviour === 'confirm' && !first.has(a.orderId)) first.set(a.orderId, a.sentAt);
    }
    const confirmed = new Set(
      this.actions.filter((a) => a.behaviour === 'confirm' && a.status === 200).map((a) => a.orderId),
    );
    return Math.max(...[...confirmed].map((id) => first.get(id)!));
  }
}

/** Reads every ticket once, spread over the fleet; answers each ticket's reading with when it was asked. */
export async function readTickets(
  ticketIds: readonly string[],
  targets: () => string[],
  concurrency: number,
): Promise<Map<string, Answer>> {
  const read = new Map<string, Answer>();
  await inParallel(ticketIds, concurrency, async (id) => {
    read.set(id, await request(`${pick(targets)}/line-tickets/${id}`, 'GET'));
  });
  return read;
}

/**
 * A few waiting customers watching their tickets, each read every 50 ms from alternating members: when each first
 * read `sold_out` (the request's send time and answer time), and whether any read anything but waiting before.
 */
export class SoldOutWatch {
  readonly soldOutAt = new Map<string, { sentAt: number; receivedAt: number }>();
  readonly otherStatuses: string[] = [];
  private done: Promise<void> | undefined;
  private running = true;

  constructor(
    private readonly ticketIds: readonly string[],
    private readonly targets: () => string[],
  ) {}

  start(): this {
    this.done = Promise.all(
      this.ticketIds.map(async (id) => {
        while (this.running && !this.soldOutAt.has(id)) {
          const read = await request(`${pick(this.targets)}/line-tickets/${id}`, 'GET');
          const status = read.status === 200 ? (read.body.status as string) : `HTTP ${read.status}`;
          if (status === 'sold_out') this.soldOutAt.set(id, { sentAt: read.sentAt, receivedAt: read.receivedAt });
          else {
            if (status !== 'waiting') this.otherStatuses.push(`${id}: ${status}`);
            await sleep(50);
          }
        }
      }),
    ).then(() => {});
    return this;
  }

  /** True once every watched ticket read sold out. */
  allSoldOut(): boolean {
    return this.soldOutAt.size === this.ticketIds.length;
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}
