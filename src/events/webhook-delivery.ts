import { createHmac } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { Db } from '../db/database.js';
import { createClient } from '../db/listed-hosts.js';
import type { Logger } from '../logger.js';
import type { StockEvent } from './event-types.js';
import type { EventMetrics } from './event-metrics.js';
import { PeriodicJob } from './periodic-job.js';
import { type DeliveryFailure, failureOf, loadWebhookClient, type WebhookHttpClient } from './webhook-client.js';
import type { DestinationGuard } from './webhook-destinations.js';
import { headPosition, readEvents } from './feed.repository.js';
import {
  type Attempt,
  dueWebhooks,
  findWebhook,
  type Progress,
  recordProgress,
  type WebhookRow,
} from './webhook.repository.js';

export interface DeliveryOptions {
  /** How often this instance looks for endpoints with events to send. */
  pollMs: number;
  /** First retry after about this long, doubling each time up to `backoffMaxMs` (each with jitter). */
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** An event failing for this long is marked failed and the endpoint moves on (at least 24 h by default). */
  retryForMs: number;
  /** A receiver that takes longer than this to answer (its headers, or each part of its body) failed the attempt. */
  timeoutMs: number;
}

/** Endpoints one instance serves at once. */
const ENDPOINTS_AT_ONCE = 8;
/** Events one endpoint is sent per turn, before the instance looks at the others again. */
const EVENTS_PER_TURN = 200;
/** The first key of the endpoints' advisory locks (the second is the endpoint's id, hashed). */
const LOCK_NAMESPACE = 20;
/** Share of its time the event loop may be busy before deliveries make way for requests, measured over this window. */
const BUSY_LOOP = 0.6;
const LOOP_WINDOW_MS = 100;
/** While the loop is that busy, each delivery first waits this long. */
const MAKE_WAY_MS = 10;

/**
 * Sends each endpoint its events, one at a time in feed order, so each SKU's events arrive in their sequence: at least
 * once (the cursor moves only after a 2xx), retried with exponential backoff and jitter, given up after
 * `retryForMs` (marked failed, visible in the deliveries, replayable).
 *
 * Any instance may deliver, but an endpoint only by one at a time: its sender holds a Postgres advisory lock on the
 * endpoint, on a connection of its own. Postgres drops the lock when that connection ends — the instance stopped,
 * crashed or was killed — so another instance takes over on its next poll; and a sender whose lock connection broke
 * stops before its next request. The order path never waits on any of this: deliveries read the feed, nothing else.
 */
export class WebhookDelivery {
  private readonly job: PeriodicJob;
  private lockClient: pg.Client | undefined;
  private stopped = false;
  /**
   * The HTTP client and its connections to receivers, kept open between deliveries. Loaded with the first delivery
   * rather than with this module: undici takes about 5 MB of heap (20 MB of memory), which an instance whose shop
   * registered no webhook never needs.
   */
  private client: WebhookHttpClient | undefined;
  /** How busy the event loop was over the last window (see makeWay). */
  private loop = { sample: performance.eventLoopUtilization(), at: performance.now(), busy: false };

  constructor(
    private readonly db: Db,
    private readonly databaseUrl: string,
    private readonly options: DeliveryOptions,
    /** Checks each receiver's addresses as its connection is made. */
    private readonly destinations: DestinationGuard,
    private readonly metrics: EventMetrics,
    private readonly log: Logger,
  ) {
    this.job = new PeriodicJob(
      options.pollMs,
      () => this.tick(),
      (error) => log.warn({ err: error.message }, 'webhook deliveries paused'),
    );
  }

  start(): void {
    this.job.start();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.job.stop();
    await this.client?.dispatcher.destroy();
    await this.lockClient?.end().catch(() => {});
  }

  private async tick(): Promise<void> {
    const due = await dueWebhooks(this.db, ENDPOINTS_AT_ONCE);
    if (due.length === 0) return;
    const client = await this.locks();
    // One statement takes the tick's locks and one frees them: a pg client runs one query at a time.
    const { rows } = await client.query<{ id: string }>(
      'select id from unnest($2::text[]) as id where pg_try_advisory_lock($1, hashtext(id))',
      [LOCK_NAMESPACE, due],
    );
    const locked = rows.map((row) => row.id);
    if (locked.length === 0) return;
    try {
      await Promise.all(locked.map((id) => this.serve(id, client)));
    } finally {
      if (this.lockClient === client) {
        await client
          .query('select pg_advisory_unlock($1, hashtext(id)) from unnest($2::text[]) as id', [LOCK_NAMESPACE, locked])
          .catch(() => {});
      }
    }
  }

  /** The connection holding this instance's endpoint locks, opened on first need and again after it broke. */
  private async locks(): Promise<pg.Client> {
    if (this.lockClient) return this.lockClient;
    // Named after this process, so an operator (or a test) can see which instance holds which endpoint.
    const client = createClient(this.databaseUrl, {
      application_name: `webhooks pid ${process.pid}`,
    });
    // A broken connection has lost every lock it held: senders check `lockClient` before each request.
    client.on('error', () => {
      if (this.lockClient === client) this.lockClient = undefined;
    });
    client.on('end', () => {
      if (this.lockClient === client) this.lockClient = undefined;
    });
    await client.connect();
    this.lockClient = client;
    return client;
  }

  /** One turn of one endpoint whose lock this instance holds. */
  private async serve(id: string, lock: pg.Client): Promise<void> {
    let sent = 0;
    while (sent < EVENTS_PER_TURN) {
      const hook = await findWebhook(this.db, id);
      if (!hook || !hook.enabled || hook.next_attempt_at.getTime() > Date.now()) return;
      // Positions up to the head are all committed: an endpoint none of them matches can skip to it.
      const head = await headPosition(this.db);
      const events = await readEvents(this.db, {
        after: hook.cursor,
        upTo: head,
        types: hook.types as StockEvent['type'][],
        skus: hook.skus,
        limit: Math.min(100, EVENTS_PER_TURN - sent),
      });
      if (events.length === 0) {
        if (head > hook.cursor) await recordProgress(this.db, id, hook.cursor, { kind: 'advance', to: head });
        this.metrics.caughtUp(id);
        return;
      }
      // Deliveries are recorded once per page (and at the first failure): a crash in between sends those again,
      // which at-least-once allows, and spares each event a statement of its own.
      let delivered = hook.cursor;
      const attempts: Attempt[] = [];
      const record = (progress: Progress) => recordProgress(this.db, id, hook.cursor, progress, attempts);
      for (const event of events) {
        await this.makeWay();
        if (this.stopped || this.lockClient !== lock) break;
        const result = await this.send(hook, event);
        sent++;
        const progress = this.progressAfter(hook, event, result.ok);
        const outcome = result.ok ? 'delivered' : progress.kind === 'advance' ? 'failed' : 'retrying';
        attempts.push({ eventId: Number(event.id), attempt: hook.attempts + 1, outcome, ...result });
        this.metrics.attempted(id, outcome, event.occurredAt);
        if (progress.kind === 'retry') {
          // What went through before it is kept; the failed event is tried again after the backoff.
          const failed = attempts.pop()!;
          if (attempts.length > 0 && !(await record({ kind: 'advance', to: delivered }))) return;
          hook.cursor = delivered;
          attempts.splice(0, attempts.length, failed);
          await record(progress);
          return;
        }
        if (outcome === 'failed') {
          this.log.warn({ webhook: id, event: event.id }, 'webhook event given up after retrying; replayable');
        }
        delivered = Number(event.id);
        hook.attempts = 0;
        hook.failing_since = null;
      }
      if (attempts.length === 0 || !(await record({ kind: 'advance', to: delivered }))) return;
    }
  }

  /**
   * Deliveries make way for requests: while this process's event loop was busy more than BUSY_LOOP of the last window,
   * each delivery first waits MAKE_WAY_MS. A sale that saturates the instance then leaves its endpoints up to a hundred
   * events a second each, and their lag builds until the sale eases (it drains at full speed after); the orders keep
   * the CPU, which a sending instance would otherwise split with them (a delivery costs it over half of what an order
   * does here). The feed and its stream are read at full speed throughout.
   */
  private async makeWay(): Promise<void> {
    const now = performance.now();
    if (now - this.loop.at >= LOOP_WINDOW_MS) {
      const sample = performance.eventLoopUtilization();
      const busy = performance.eventLoopUtilization(sample, this.loop.sample).utilization > BUSY_LOOP;
      this.loop = { sample, at: now, busy };
    }
    if (this.loop.busy) await sleep(MAKE_WAY_MS);
  }

  /** After an attempt: on to the next event (delivered, or failing for longer than `retryForMs`), or retry later. */
  private progressAfter(hook: WebhookRow, event: StockEvent, ok: boolean): Progress {
    if (ok) return { kind: 'advance', to: Number(event.id) };
    const failingSince = hook.failing_since ?? new Date();
    if (Date.now() - failingSince.getTime() >= this.options.retryForMs)
      return { kind: 'advance', to: Number(event.id) };
    const attempts = hook.attempts + 1;
    return { kind: 'retry', attempts, failingSince, nextAttemptAt: new Date(Date.now() + this.backoff(attempts)) };
  }

  /** Exponential backoff with equal jitter: half the doubled delay, plus up to as much again at random. */
  private backoff(attempts: number): number {
    const delay = Math.min(this.options.backoffMaxMs, this.options.backoffBaseMs * 2 ** (attempts - 1));
    return delay / 2 + Math.random() * (delay / 2);
  }

  /**
   * One Standard Webhooks request: the event as `data`, signed with the endpoint's secret. On undici's request API with
   * kept-alive connections: a delivery costs the instance about 85 µs of CPU here, against 212 through node:http with
   * the specification's own signing (and fetch costs several times node:http); during a sale that CPU is taken from
   * orders.
   */
  private async send(
    hook: WebhookRow,
    event: StockEvent,
  ): Promise<{ ok: boolean; status: number | null; error: DeliveryFailure | null }> {
    const body = JSON.stringify({ type: event.type, timestamp: event.occurredAt, data: event });
    try {
      this.client ??= loadWebhookClient(this.destinations);
      const answer = await this.client.undici.request(hook.url, {
        method: 'POST',
        dispatcher: this.client.dispatcher,
        headers: { 'content-type': 'application/json', ...signatureHeaders(hook.secret, event.id, body) },
        body,
        headersTimeout: this.options.timeoutMs,
        bodyTimeout: this.options.timeoutMs,
      });
      // Read to the end, so the connection can carry the next delivery. Redirects are not followed: a receiver answers
      // where it was registered, and a redirect must not lead past the destination check.
      await answer.body.dump();
      const status = answer.statusCode;
      return { ok: status >= 200 && status < 300, status, error: null };
    } catch (error) {
      // The status when one came back; otherwise one coarse reason, never the socket's own error (see failureOf).
      return { ok: false, status: null, error: failureOf(error) };
    }
  }
}

/**
 * The Standard Webhooks headers (standardwebhooks.com): the message id (the event's), the send time in seconds, and
 * `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` keyed with the secret's base64 after its `whsec_` prefix. Signed
 * with node:crypto (the specification's library hashes in JavaScript, four times slower); the tests verify every
 * delivery with that library.
 */
function signatureHeaders(secret: string, id: string, body: string, now = Date.now()): Record<string, string> {
  const timestamp = Math.floor(now / 1000);
  const key = Buffer.from(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret, 'base64');
  const signature = createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64');
  return { 'webhook-id': id, 'webhook-timestamp': String(timestamp), 'webhook-signature': `v1,${signature}` };
}
