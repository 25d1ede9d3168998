import { randomBytes, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db } from '../db/database.js';
import type { Selectable } from 'kysely';
import type { WebhookDeliveryTable, WebhookTable } from '../db/schema.js';
import type { EventType } from './event-types.js';
import { headPosition } from './feed.repository.js';

export type WebhookRow = Selectable<WebhookTable>;

/** An endpoint as the API shows it; the secret only in the answer to its creation. */
export interface WebhookView {
  id: string;
  url: string;
  types: EventType[];
  skus: string[] | null;
  enabled: boolean;
  /** Every matching event up to this cursor was delivered or given up on. */
  deliveredThrough: string;
  /** Failed attempts at the next event, and when it is tried again. */
  attempts: number;
  failingSince: string | null;
  nextAttemptAt: string;
  createdAt: string;
}

export function viewOf(row: WebhookRow): WebhookView {
  return {
    id: row.id,
    url: row.url,
    types: row.types as EventType[],
    skus: row.skus,
    enabled: row.enabled,
    deliveredThrough: String(row.cursor),
    attempts: row.attempts,
    failingSince: row.failing_since?.toISOString() ?? null,
    nextAttemptAt: row.next_attempt_at.toISOString(),
    createdAt: row.created_at.toISOString(),
  };
}

/** A Standard Webhooks signing secret: `whsec_` and 32 random bytes in base64. */
function newSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** Registers an endpoint; it receives the events sequenced from now on (replay reaches back further). */
export async function insertWebhook(
  db: Db,
  input: { url: string; types: EventType[]; skus?: string[] | undefined },
): Promise<WebhookRow> {
  return db
    .insertInto('webhooks')
    .values({
      id: randomUUID(),
      url: input.url,
      types: input.types,
      skus: input.skus ?? null,
      secret: newSecret(),
      cursor: await headPosition(db),
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

export function listWebhooks(db: Db): Promise<WebhookRow[]> {
  return db.selectFrom('webhooks').selectAll().orderBy('created_at').orderBy('id').execute();
}

export function findWebhook(db: Db, id: string): Promise<WebhookRow | undefined> {
  return db.selectFrom('webhooks').selectAll().where('id', '=', id).executeTakeFirst();
}

export function updateWebhook(
  db: Db,
  id: string,
  changes: {
    url?: string | undefined;
    types?: EventType[] | undefined;
    skus?: string[] | null | undefined;
    enabled?: boolean | undefined;
  },
): Promise<WebhookRow | undefined> {
  return db
    .updateTable('webhooks')
    .set({
      ...(changes.url !== undefined && { url: changes.url }),
      ...(changes.types !== undefined && { types: changes.types }),
      ...(changes.skus !== undefined && { skus: changes.skus }),
      ...(changes.enabled !== undefined && { enabled: changes.enabled }),
    })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();
}

export async function deleteWebhook(db: Db, id: string): Promise<boolean> {
  const result = await db.deleteFrom('webhooks').where('id', '=', id).executeTakeFirst();
  return Number(result.numDeletedRows) > 0;
}

/**
 * Starts the endpoint over after `after`: every matching event after it is delivered again, at once. A delivery under
 * way for the old position finds the cursor moved and does not overwrite it (`advanceCursor`).
 */
export function replayFrom(db: Db, id: string, after: number): Promise<WebhookRow | undefined> {
  return db
    .updateTable('webhooks')
    .set({ cursor: after, attempts: 0, failing_since: null, next_attempt_at: sql<Date>`now()` })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();
}

export type DeliveryRow = Selectable<WebhookDeliveryTable>;

export function listDeliveries(db: Db, webhookId: string, limit: number): Promise<DeliveryRow[]> {
  return db
    .selectFrom('webhook_deliveries')
    .selectAll()
    .where('webhook_id', '=', webhookId)
    .orderBy('id', 'desc')
    .limit(limit)
    .execute();
}

/** Endpoints with events to send now: enabled, due, and behind the feed's head. */
export async function dueWebhooks(db: Db, limit: number): Promise<string[]> {
  const { rows } = await sql<{ id: string }>`
    select id from webhooks
     where enabled and next_attempt_at <= now()
       and cursor < (select last_position from event_sequencer where id = 1)
     order by next_attempt_at
     limit ${limit}`.execute(db);
  return rows.map((row) => row.id);
}

/** What an attempt did to the endpoint's place: moved past the event, or scheduled another try. */
export type Progress =
  { kind: 'advance'; to: number } | { kind: 'retry'; attempts: number; failingSince: Date; nextAttemptAt: Date };

/** One delivery attempt, as `GET /webhooks/:id/deliveries` shows it. */
export interface Attempt {
  eventId: number;
  attempt: number;
  outcome: 'delivered' | 'retrying' | 'failed';
  status: number | null;
  error: string | null;
}

/**
 * Records attempts and moves the endpoint on, both only if its cursor is still `from`: a replay or another change
 * since leaves it as it is, and the caller reads the endpoint again. One statement, one round trip, for a page of
 * deliveries as for one: a receiver that keeps up is sent one event after another, and this is the cost beside the
 * requests.
 */
export async function recordProgress(
  db: Db,
  id: string,
  from: number,
  progress: Progress,
  attempts: readonly Attempt[] = [],
): Promise<boolean> {
  const set =
    progress.kind === 'advance'
      ? sql`cursor = ${progress.to}, attempts = 0, failing_since = null, next_attempt_at = now()`
      : sql`attempts = ${progress.attempts}, failing_since = ${progress.failingSince},
            next_attempt_at = ${progress.nextAttemptAt}`;
  const moved = sql`update webhooks set ${set} where id = ${id} and cursor = ${from} returning id`;
  const { rows } =
    attempts.length > 0
      ? await sql`with moved as (${moved}), recorded as (
            insert into webhook_deliveries (webhook_id, event_id, attempt, outcome, response_status, error)
            select m.id, a.event_id, a.attempt, a.outcome, a.status, a.error
              from moved m,
                   unnest(${attempts.map((a) => a.eventId)}::bigint[], ${attempts.map((a) => a.attempt)}::int[],
                          ${attempts.map((a) => a.outcome)}::text[], ${attempts.map((a) => a.status)}::int[],
                          ${attempts.map((a) => a.error)}::text[]) with ordinality
                     as a(event_id, attempt, outcome, status, error, n)
             order by a.n)
          select id from moved`.execute(db)
      : await moved.execute(db);
  return rows.length > 0;
}
