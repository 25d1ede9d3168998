import type { Kysely, Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database } from '../db/schema.js';
import { AppError } from '../errors.js';
import type { Movement } from './movement.js';
import type { SkuView } from './sku-view.js';

type Executor = Kysely<Database> | Transaction<Database>;

/** An admin write sent with an Idempotency-Key, and the answer it got, as stored. */
export interface AdminRequestRecord {
  fingerprint: string;
  status: number;
  response: unknown;
}

async function findAdminRequest(db: Executor, key: string): Promise<AdminRequestRecord | undefined> {
  const row = await db
    .selectFrom('admin_requests')
    .select(['request_fingerprint', 'status', 'response'])
    .where('idempotency_key', '=', key)
    .executeTakeFirst();
  return row && { fingerprint: row.request_fingerprint, status: row.status, response: row.response };
}

/** Inside the change's own transaction: of two requests with one key, the second to commit fails here. */
export async function insertAdminRequest(
  trx: Transaction<Database>,
  key: string,
  record: AdminRequestRecord,
): Promise<void> {
  await trx
    .insertInto('admin_requests')
    .values({
      idempotency_key: key,
      request_fingerprint: record.fingerprint,
      status: record.status,
      response: JSON.stringify(record.response),
    })
    .execute();
}

/** An admin write's Idempotency-Key, and a fingerprint of what the write asks (its route and body). */
export interface AdminRequest {
  key: string;
  fingerprint: string;
}

/**
 * The answer to an admin write: its status and the SKU after it (with the movement an adjustment or a count recorded);
 * `replayed` when an earlier request's answer.
 */
export interface AdminAnswer {
  status: number;
  view: SkuView & { movement?: Movement };
  replayed: boolean;
}

/**
 * Answers a request with a key already used: the first answer when it asked the same, else 422. Otherwise applies
 * it. If that fails because another request with the key committed meanwhile, answers as that one did: its key
 * refused this one's (`admin_requests` is unique), or, for two creates, its SKU did; either way this one rolled back.
 */
export async function answerOnce(
  db: Db,
  request: AdminRequest | undefined,
  apply: () => Promise<AdminAnswer>,
): Promise<AdminAnswer> {
  if (!request) return apply();
  const prior = await findAdminRequest(db, request.key);
  if (prior) return replay(prior, request);
  try {
    return await apply();
  } catch (error) {
    const winner = await findAdminRequest(db, request.key);
    if (!winner) throw error;
    return replay(winner, request);
  }
}

function replay(prior: AdminRequestRecord, request: AdminRequest): AdminAnswer {
  if (prior.fingerprint !== request.fingerprint) {
    throw new AppError('idempotency_key_reused', 'this Idempotency-Key was used for a different admin request');
  }
  return { status: prior.status, view: prior.response as AdminAnswer['view'], replayed: true };
}
