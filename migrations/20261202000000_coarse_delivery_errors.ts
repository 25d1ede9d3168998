import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Delivery records say what a subscriber needs and no more: the receiver's status when one came back, otherwise one
 * of `unreachable`, `timeout` or `tls`. Records written before kept the socket's own error code (ECONNREFUSED for a
 * closed port, UND_ERR_SOCKET for an open one that speaks no HTTP, …) and `answered <status>` beside the status; they
 * are rewritten the same way, so the records kept until retention removes them tell no more than new ones.
 * Nothing to undo: the codes are gone.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`update webhook_deliveries
               set error = case
                 when response_status is not null then null
                 when error in ('UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT')
                   then 'timeout'
                 when error ~ '^(ERR_TLS_|ERR_SSL_|CERT_|DEPTH_ZERO_|SELF_SIGNED_|UNABLE_TO_|HOSTNAME_MISMATCH)' then 'tls'
                 else 'unreachable'
               end
             where error is not null`.execute(db);
}

export async function down(): Promise<void> {}
