/** Where one lock lives in Redis. Every key of one lock shares a `{hashtag}`: one script touches them all. */
export interface RedisLockKeyspace {
  lock(name: string): string;
  fence(name: string): string;
  queue(name: string): string;
  queueDeadlines(name: string): string;
  /** Published when the lock is freed with nobody queued. */
  releaseNotice(name: string): { channel: string; message: string };
  /** Hand-offs to queued waiters: "waiter\nfence\nleaseMs\nname". */
  readonly grantChannel: string;
}

/** Locks named freely, under `prefix`; one channel carries every release notice of the keyspace. */
export function namedLockKeyspace(prefix = 'lock:'): RedisLockKeyspace {
  return {
    lock: (name) => `${prefix}{${name}}`,
    fence: (name) => `${prefix}fence:{${name}}`,
    queue: (name) => `${prefix}queue:{${name}}`,
    queueDeadlines: (name) => `${prefix}queue-deadlines:{${name}}`,
    releaseNotice: (name) => ({ channel: `${prefix}released`, message: name }),
    grantChannel: `${prefix}granted`,
  };
}
