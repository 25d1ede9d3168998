/**
 * Every error the lock layer raises, in one place; each message names the lock. Store failures (Redis, Postgres,
 * ZooKeeper connection errors) are passed through unchanged, so callers that map outages to 503 keep recognising them.
 */

/** The lock can no longer be proven held: it expired, was taken over, or its store stayed unreachable too long. */
export class LockLostError extends Error {
  override readonly name = 'LockLostError';
  constructor(key: string, reason: string) {
    super(`lock '${key}' was lost: ${reason}`);
  }
}

/** A release or extension by someone who does not hold the lock. Nothing was changed. */
export class NotLockOwnerError extends Error {
  override readonly name = 'NotLockOwnerError';
  constructor(key: string, reason: string) {
    super(`lock '${key}' is not held by this owner (${reason}); nothing was changed`);
  }
}

/** The wait budget ran out before the lock was granted. */
export class LockTimeoutError extends Error {
  override readonly name = 'LockTimeoutError';
  constructor(key: string, waitedMs: number) {
    super(`lock '${key}' stayed taken for the whole wait budget of ${waitedMs} ms`);
  }
}

/** Too few stores answered to decide (Redlock without a quorum of reachable nodes, ZooKeeper without a session). */
export class LockUnavailableError extends Error {
  override readonly name = 'LockUnavailableError';
  constructor(key: string, detail: string) {
    super(`lock '${key}' cannot be decided: ${detail}`);
  }
}

/** An option this backend cannot honour, e.g. fair waiting on a backend without a queue. */
export class UnsupportedLockOptionError extends Error {
  override readonly name = 'UnsupportedLockOptionError';
  constructor(backend: string, option: string) {
    super(`the ${backend} lock backend does not support '${option}'`);
  }
}

/**
 * Fenced out: a write the data store refused because it carried a fencing token older than one already written (the
 * lock was lost to a newer holder). Thrown inside a transaction to roll the rest back; the caller starts over with
 * fresh locks. Never reaches a client.
 */
export class FencedOutError extends Error {
  override readonly name = 'FencedOutError';
  constructor() {
    super('the write was fenced out: a newer holder of the lock has written since');
  }
}
