/**
 * Every error the lock layer raises, in one place. Store failures (Redis, Postgres, ZooKeeper connection errors) are
 * passed through unchanged, so callers that map outages to 503 keep recognising them.
 */
export class LockError extends Error {
  constructor(
    readonly key: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The lock can no longer be proven held: it expired, was taken over, or its store stayed unreachable too long. */
export class LockLostError extends LockError {
  constructor(
    key: string,
    readonly reason: string,
  ) {
    super(key, `lock '${key}' was lost: ${reason}`);
  }
}

/** A release or extension by someone who does not hold the lock. Nothing was changed. */
export class NotLockOwnerError extends LockError {
  constructor(
    key: string,
    readonly reason: string,
  ) {
    super(key, `lock '${key}' is not held by this owner (${reason}); nothing was changed`);
  }
}

/** The wait budget ran out before the lock was granted. */
export class LockTimeoutError extends LockError {
  constructor(
    key: string,
    readonly waitedMs: number,
  ) {
    super(key, `lock '${key}' stayed taken for the whole wait budget of ${waitedMs} ms`);
  }
}

/** Too few stores answered to decide (Redlock without a quorum of reachable nodes, ZooKeeper without a session). */
export class LockUnavailableError extends LockError {
  constructor(key: string, detail: string, options?: ErrorOptions) {
    super(key, `lock '${key}' cannot be decided: ${detail}`, options);
  }
}

/** An option this backend cannot honour, e.g. fair waiting on a backend without a queue. */
export class UnsupportedLockOptionError extends LockError {
  constructor(key: string, backend: string, option: string) {
    super(key, `the ${backend} lock backend does not support '${option}'`);
  }
}
