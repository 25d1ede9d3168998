/**
 * Every error the service answers with, in one place. Each code is stable: clients may branch on it.
 * docs/errors.md lists the same codes; a test keeps the two in step.
 */
export const errorCatalog = {
  bad_request: { status: 400, title: 'Invalid request' },
  invalid_json: { status: 400, title: 'Malformed JSON body' },
  invalid_idempotency_key: { status: 400, title: 'Invalid Idempotency-Key header' },
  customer_required: { status: 400, title: 'This SKU needs a customerId' },
  unauthorized: { status: 401, title: 'Credential required' },
  invalid_token: { status: 401, title: 'Credential not valid' },
  forbidden: { status: 403, title: 'Not allowed to this caller' },
  sku_not_found: { status: 404, title: 'Unknown SKU' },
  order_not_found: { status: 404, title: 'Unknown order' },
  webhook_not_found: { status: 404, title: 'Unknown webhook' },
  line_not_found: { status: 404, title: 'SKU not sold through a line' },
  ticket_not_found: { status: 404, title: 'Unknown line ticket' },
  route_not_found: { status: 404, title: 'No such route' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  sku_exists: { status: 409, title: 'SKU already exists' },
  out_of_stock: { status: 409, title: 'Not enough stock' },
  not_on_sale: { status: 409, title: 'SKU not on sale now' },
  purchase_limit: { status: 409, title: 'Per-customer limit reached' },
  order_not_reserved: { status: 409, title: 'Order is no longer reserved' },
  stale_count: { status: 409, title: 'Available changed since it was read' },
  line_required: { status: 409, title: 'SKU sold through its line only' },
  line_full: { status: 409, title: 'Line is full' },
  line_closed: { status: 409, title: 'Line is closed' },
  body_too_large: { status: 413, title: 'Request body too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported content type' },
  idempotency_key_reused: { status: 422, title: 'Idempotency-Key reused with a different request' },
  webhook_destination_refused: { status: 422, title: 'Webhook destination not allowed' },
  stock_limit_exceeded: { status: 422, title: 'Stock would exceed the supported maximum' },
  rate_limited: { status: 429, title: 'Too many orders' },
  too_many_streams: { status: 429, title: 'Too many open streams' },
  lock_busy: { status: 503, title: 'Stock is busy, retry shortly' },
  dependency_unavailable: { status: 503, title: 'A backing service is unavailable' },
  shutting_down: { status: 503, title: 'Service is shutting down' },
  internal: { status: 500, title: 'Internal error' },
} as const satisfies Record<string, { status: number; title: string }>;

export type ErrorCode = keyof typeof errorCatalog;

export class AppError extends Error {
  readonly status: number;
  readonly title: string;

  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    /** Extra members for the problem document, e.g. the stock seen on out_of_stock. */
    readonly extensions: Record<string, unknown> = {},
    /** Seconds after which a retry may succeed (503 answers; not_on_sale before the opening). */
    readonly retryAfterSeconds?: number,
  ) {
    // An answer to the client, not a fault: a stack trace would cost time on hot paths (a sold-out SKU refuses
    // thousands of orders a second) and never be read.
    const stackTraceLimit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(detail);
    Error.stackTraceLimit = stackTraceLimit;
    this.status = errorCatalog[code].status;
    this.title = errorCatalog[code].title;
  }
}

/** A setting the service cannot start with (src/config.ts): the message names it, and the service does not start. */
export class ConfigError extends Error {}

const lockStoreFailures = new Set(['LockUnavailableError', 'CONNECTION_LOSS', 'SESSION_EXPIRED', 'OPERATION_TIMEOUT']);
const connectionErrorCodes = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EHOSTUNREACH']);

/**
 * True for failures of Redis or Postgres themselves (down, restarting, unreachable), which answer 503 rather than
 * 500: the request may succeed once the dependency is back.
 */
export function isDependencyFailure(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  // The lock store cannot decide (no Redlock quorum, no ZooKeeper session), or ZooKeeper lost the connection.
  if (lockStoreFailures.has(error.name)) return true;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (connectionErrorCodes.has(code)) return true;
    // Postgres SQLSTATE classes 08 (connection exception, and no host of DATABASE_URL's list writable now) and 57P
    // (operator intervention: shutdown, restart), and 25006: the server refuses writes, as a demoted primary, or a
    // promoted standby held read-only until the old primary is known demoted, do during a failover.
    if (/^08|^57P|^25006$/.test(code)) return true;
  }
  if (
    /Connection terminated|Connection is closed|not queryable|enableOfflineQueue|timeout exceeded when trying to connect|Query read timeout|MaxRetriesPerRequest|LOADING|READONLY|the database system is/i.test(
      error.message,
    )
  )
    return true;
  // A Redis Cluster between a primary's death and its replica's promotion, or while slots move.
  return /CLUSTERDOWN|TRYAGAIN|MASTERDOWN|Too many Cluster redirections|Failed to refresh slots cache|None of startup nodes/.test(
    error.message,
  );
}
