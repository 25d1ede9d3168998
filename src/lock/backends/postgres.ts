import type pg from 'pg';
import { createPool } from '../../db/listed-hosts.js';
import type { LockCapabilities } from '../distributed-lock.js';
import type { Hold, StoreGrant, StoreRelease } from '../hold.js';
import { LockClient, type LockClientOptions } from '../lock-client.js';

export interface PostgresLockOptions extends LockClientOptions {
  connectionString: string;
  /** Connections for lock statements, apart from the service's pool so orders never queue behind them (default 5). */
  poolSize?: number;
}

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

const RELEASE = `
update distributed_locks
   set hold_count = hold_count - 1,
       owner = case when hold_count > 1 then owner end,
       expires_at = case when hold_count > 1 then expires_at end
 where lock_key = $1 and owner = $2 and expires_at > clock_timestamp()
returning hold_count`;

const EXTEND = `
update distributed_locks set expires_at = clock_timestamp() + $3::integer * interval '1 millisecond'
 where lock_key = $1 and owner = $2 and expires_at > clock_timestamp()`;

/**
 * The database lock of the reference articles, the Postgres way: a lock table (name, owner, hold count, expiry, token),
 * each operation one atomic statement. A lease expires like Redis's, so a holder that dies or hangs frees the lock
 * without pinning a connection. Not advisory locks: those pin a pool connection per held lock, never expire (a hung
 * process holds forever), and have no token to fence with.
 */
export class PostgresLock extends LockClient {
  readonly kind = 'postgres' as const;
  readonly capabilities: LockCapabilities = { fair: false, retakes: false };
  private readonly pool: pg.Pool;

  constructor(options: PostgresLockOptions) {
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
    await this.pool.end().catch(() => {});
  }
}
