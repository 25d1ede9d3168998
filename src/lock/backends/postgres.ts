import type pg from 'pg';
import { createClient, createPool } from '../../db/listed-hosts.js';
import type { LockCapabilities } from '../distributed-lock.js';
import { type Hold, sleepUntilWoken, type StoreGrant, type StoreRelease, type WaitBudget } from '../hold.js';
import { LockClient, type LockClientOptions } from '../lock-client.js';

export interface PostgresLockOptions extends LockClientOptions {
  connectionString: string;
  /** Connections for lock statements, apart from the service's pool so orders never queue behind them (default 5). */
  poolSize?: number;
}

const RELEASE_CHANNEL = 'distributed_lock_released';
const MAX_SLEEP_MS = 250;

/*
 * Fencing tokens: max(last + 1, the database clock in µs). The row is kept after release, so tokens only grow; the
 * clock floor keeps them above tokens other backends issued for the same key.
 */
const ACQUIRE = `
insert into distributed_locks as l (lock_key, owner, hold_count, fence, expires_at)
values ($1, $2, 1, floor(extract(epoch from clock_timestamp()) * 1000000)::bigint,
        clock_timestamp() + $3::integer * interval '1 millisecond')
on conflict (lock_key) do update
   set owner = excluded.owner, hold_count = 1, fence = greatest(l.fence + 1, excluded.fence), expires_at = excluded.expires_at
 where l.owner is null or l.expires_at <= clock_timestamp()
returning fence`;

const REENTER = `
update distributed_locks
   set hold_count = hold_count + 1,
       expires_at = greatest(expires_at, clock_timestamp() + $3::integer * interval '1 millisecond')
 where lock_key = $1 and owner = $2 and expires_at > clock_timestamp()
returning hold_count`;

// The notice goes out on commit of this single statement, only when the last hold is dropped.
const RELEASE = `
with dropped as (
  update distributed_locks
     set hold_count = hold_count - 1,
         owner = case when hold_count > 1 then owner end,
         expires_at = case when hold_count > 1 then expires_at end
   where lock_key = $1 and owner = $2 and expires_at > clock_timestamp()
  returning hold_count
)
select hold_count, case when hold_count = 0 then pg_notify('${RELEASE_CHANNEL}', $1)::text end as notified from dropped`;

const EXTEND = `
update distributed_locks set expires_at = clock_timestamp() + $3::integer * interval '1 millisecond'
 where lock_key = $1 and owner = $2 and expires_at > clock_timestamp()`;

/**
 * The database lock of the reference articles, done the Postgres way: a lock table with the lock name as primary
 * key, an owner, a hold count, an expiry and the fencing token, each operation one atomic statement (INSERT … ON
 * CONFLICT … WHERE expired). A lease expires like Redis's, so a holder that dies or hangs frees the lock without any
 * connection being pinned; waiters are woken by LISTEN/NOTIFY and poll with a short backoff between notices.
 *
 * Why not advisory locks: a session-level advisory lock lives on one connection, so every held lock would pin a pool
 * connection for its whole hold, it has no expiry (a hung process holds forever), and it has no token to fence with.
 */
export class PostgresLock extends LockClient {
  readonly kind = 'postgres' as const;
  readonly capabilities: LockCapabilities = { fair: false, publishesReleaseNotices: false, retakes: false };
  private readonly pool: pg.Pool;
  private listener: Promise<pg.Client> | undefined;
  private readonly waiters = new Map<string, Array<() => void>>();

  constructor(private readonly options: PostgresLockOptions) {
    super(options);
    this.pool = createPool(options.connectionString, {
      max: options.poolSize ?? 5,
      connectionTimeoutMillis: 2_000,
      query_timeout: 10_000,
    });
    this.pool.on('error', () => {});
  }

  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant | null> {
    const requestedAt = Date.now();
    const { rows } = await this.pool.query<{ fence: string }>(ACQUIRE, [key, owner, ttlMs]);
    return rows[0] ? { fence: Number(rows[0].fence), leaseMs: ttlMs, requestedAt } : null;
  }

  protected async waitStore(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant | null> {
    // Notices only shorten waits; without them the backoff still bounds every one.
    await this.listen().catch(() => {});
    for (let attempt = 0; ; attempt++) {
      budget.signal?.throwIfAborted();
      const grant = await this.tryStore(key, owner, ttlMs);
      if (grant) return grant;
      const remaining = budget.deadline - Date.now();
      if (remaining <= 0) return null;
      const base = Math.min(MAX_SLEEP_MS, 5 * 2 ** attempt);
      const sleep = sleepUntilWoken(Math.min(remaining, base / 2 + (Math.random() * base) / 2), budget.signal);
      const queue = this.waiters.get(key) ?? [];
      this.waiters.set(key, queue);
      queue.push(sleep.wake);
      try {
        await sleep.promise;
      } finally {
        queue.splice(queue.indexOf(sleep.wake), 1);
        if (queue.length === 0) this.waiters.delete(key);
      }
    }
  }

  protected async reenterStore(hold: Hold, ttlMs: number): Promise<boolean> {
    const { rowCount } = await this.pool.query(REENTER, [hold.key, hold.owner, ttlMs]);
    return rowCount === 1;
  }

  protected async releaseStore(hold: Hold): Promise<StoreRelease> {
    const { rows } = await this.pool.query(RELEASE, [hold.key, hold.owner]);
    return rows[0] ? 'released' : 'lost';
  }

  protected async extendStore(hold: Hold, ttlMs: number): Promise<boolean> {
    const { rowCount } = await this.pool.query(EXTEND, [hold.key, hold.owner, ttlMs]);
    return rowCount === 1;
  }

  protected async closeStore(): Promise<void> {
    const listener = await this.listener?.catch(() => undefined);
    this.listener = undefined;
    await listener?.end().catch(() => {});
    await this.pool.end().catch(() => {});
  }

  /** One LISTEN connection per client; a notice wakes the longest waiter for that lock. */
  private listen(): Promise<pg.Client> {
    this.listener ??= (async () => {
      const client = createClient(this.options.connectionString, { connectionTimeoutMillis: 2_000 });
      client.on('notification', ({ payload }) => {
        if (payload) this.waiters.get(payload)?.[0]?.();
      });
      client.on('error', () => {
        this.listener = undefined;
        client.end().catch(() => {});
      });
      await client.connect();
      await client.query(`listen ${RELEASE_CHANNEL}`);
      return client;
    })();
    this.listener.catch(() => {
      this.listener = undefined;
    });
    return this.listener;
  }
}
