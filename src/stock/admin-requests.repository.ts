import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema.js';

type Executor = Kysely<Database> | Transaction<Database>;

/** An admin write sent with an Idempotency-Key, and the answer it got. */
export interface AdminRequestRecord {
  fingerprint: string;
  status: number;
  response: unknown;
}

export async function findAdminRequest(db: Executor, key: string): Promise<AdminRequestRecord | undefined> {
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
