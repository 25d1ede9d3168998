import type { PostgresPool, PostgresPoolClient } from 'kysely';
import pg from 'pg';
import { type ConnectionTarget, type HostPort, parseConnectionString } from './connection-string.js';

/**
 * Connections to the server of a connection string's host list that suits it (connection-string.ts), as libpq makes
 * them and node-postgres does not: pg reads one host. Every new connection goes to the host found last; when that
 * one fails (refused, gone, or no longer what the string asks for) the list is probed again, in its order, so after a
 * failover the next connections find the promoted server by themselves. A connection that asks for `read-write` or
 * `primary` checks its server once connected, so none writes through a standby, and a connection that meets an error
 * saying its server went read-only or away (dropsConnection) is closed rather than pooled again.
 */

/** No host of the list is what the string asks for now (between a primary's death and a standby's promotion). */
export class NoSuitableHostError extends Error {
  // libpq's "unable to establish connection": a connection exception, like a refused connection.
  readonly code = '08001';
}

/**
 * Errors after which a connection is not used again and its host is looked for anew: its server refuses writes
 * (25006: demoted, or promoted but held read-only until the old primary is known demoted), is shutting down or
 * restarting (57P01–57P03), or the connection broke (class 08, or a socket error).
 */
export function dropsConnection(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  if (typeof code === 'string' && (code === '25006' || /^57P0[123]$|^08/.test(code))) return true;
  return error instanceof Error && /Connection terminated|not queryable|ECONNRESET|EPIPE/.test(error.message);
}

/** Which host of one connection string new connections go to, shared by a pool's connections. */
class HostChoice {
  private found: HostPort | undefined;
  private finding: Promise<HostPort> | undefined;

  constructor(
    readonly target: ConnectionTarget,
    private readonly probeTimeoutMs: number,
  ) {}

  /** The host found last, or the first of the list that suits now (one search at a time, shared). */
  async host(): Promise<HostPort> {
    if (this.target.hosts.length === 1) return this.target.hosts[0]!;
    if (this.found) return this.found;
    this.finding ??= this.find().finally(() => (this.finding = undefined));
    return this.finding;
  }

  /** The next connection looks again (unless another one found a host since). */
  forget(host: HostPort | undefined): void {
    if (this.found === host) this.found = undefined;
  }

  /** True when the connected client's server is what the string asks for. */
  async suits(client: pg.Client): Promise<boolean> {
    const wanted = this.target.targetSessionAttrs;
    if (wanted === 'any') return true;
    const { rows } = await client.query<{ in_recovery: boolean; read_only: string }>(
      "select pg_is_in_recovery() as in_recovery, current_setting('transaction_read_only') as read_only",
    );
    return wanted === 'primary' ? !rows[0]!.in_recovery : rows[0]!.read_only === 'off';
  }

  private async find(): Promise<HostPort> {
    for (const host of this.target.hosts) {
      const probe = new pg.Client({ ...this.target.client, ...host, connectionTimeoutMillis: this.probeTimeoutMs });
      probe.on('error', () => {});
      try {
        await probe.connect();
        if (await this.suits(probe)) return (this.found = host);
      } catch {
        // Down or unreachable: the next one.
      } finally {
        await probe.end().catch(() => {});
      }
    }
    throw new NoSuitableHostError(
      `none of the ${this.target.hosts.length} Postgres hosts is ${this.target.targetSessionAttrs} now`,
    );
  }
}

interface ListedHostConfig extends pg.ClientConfig {
  hostChoice: HostChoice;
}

/** A pg client that connects to the host its HostChoice names, and checks the server when the string asks. */
class ListedHostClient extends pg.Client {
  private readonly choice: HostChoice;
  private listed: HostPort | undefined;

  constructor(config: ListedHostConfig) {
    super(config);
    this.choice = config.hostChoice;
    // A connection that broke says nothing good of its host: the next connection looks again.
    this.on('error', () => this.choice.forget(this.listed));
  }

  override connect(): Promise<pg.Client>;
  override connect(callback: (err: Error) => void): void;
  override connect(callback?: (err: Error) => void): Promise<pg.Client> | void {
    const connected = this.connectListed();
    if (!callback) return connected;
    // pg's own clients call back with null on success (the pool reads only the error).
    const done = callback as (err: Error | null) => void;
    connected.then(
      () => done(null),
      (error: Error) => done(error),
    );
  }

  /** After an error that dropsConnection: the host is looked for anew. */
  lostHost(): void {
    this.choice.forget(this.listed);
  }

  private async connectListed(): Promise<pg.Client> {
    const host = await this.choice.host();
    // The pool's connect timeout may have struck while the hosts were probed.
    if (this.connection.stream.destroyed) throw new Error('Connection terminated due to connection timeout');
    this.listed = host;
    this.host = host.host;
    this.port = host.port;
    try {
      await super.connect();
    } catch (error) {
      this.choice.forget(host);
      throw error;
    }
    if (!(await this.choice.suits(this).catch(() => false))) {
      this.choice.forget(host);
      await this.end().catch(() => {});
      throw new NoSuitableHostError(`${host.host}:${host.port} is not ${this.choice.target.targetSessionAttrs} now`);
    }
    return this;
  }
}

/** A pg pool on a connection string with one host or several (connection-string.ts). */
export function createPool(connectionString: string, options: Omit<pg.PoolConfig, 'connectionString'>): pg.Pool {
  const target = parseConnectionString(connectionString);
  const hostChoice = new HostChoice(target, options.connectionTimeoutMillis || 2_000);
  const config: pg.PoolConfig & ListedHostConfig = {
    ...target.client,
    ...options,
    Client: ListedHostClient as unknown as pg.PoolConfig['Client'],
    hostChoice,
  };
  const pool = new pg.Pool(config);
  // A client released with an error is closed by the pool; one that says its server went away also sends the next
  // connections looking for the server that took over.
  pool.on('release', (error, client) => {
    if (error && dropsConnection(error)) (client as unknown as ListedHostClient).lostHost();
  });
  return pool;
}

/** A single pg client (not yet connected) on a connection string with one host or several. */
export function createClient(connectionString: string, options: Omit<pg.ClientConfig, 'connectionString'>): pg.Client {
  const target = parseConnectionString(connectionString);
  const hostChoice = new HostChoice(target, options.connectionTimeoutMillis || 2_000);
  return new ListedHostClient({ ...target.client, ...options, hostChoice });
}

/**
 * The pool as Kysely uses it. Kysely releases a client without saying how its queries went, so the pool would keep
 * one whose server went read-only or away: this releases it with the error that showed it, and the pool closes it.
 */
export function kyselyPool(pool: pg.Pool): PostgresPool {
  return {
    connect: async () => {
      const client = await pool.connect();
      let dropped: Error | undefined;
      const wrapped: PostgresPoolClient = {
        query: ((...args: unknown[]) => {
          const result = (client.query as (...a: unknown[]) => unknown)(...args);
          if (result instanceof Promise) {
            result.catch((error: Error) => {
              if (dropsConnection(error)) dropped ??= error;
            });
          }
          return result;
        }) as PostgresPoolClient['query'],
        release: () => client.release(dropped),
      };
      return wrapped;
    },
    end: () => pool.end(),
  };
}
