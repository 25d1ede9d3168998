import { createRequire } from 'node:module';
import { posix } from 'node:path';
import type * as ZooKeeperClient from 'node-zookeeper-client';
import type { LockCapabilities } from '../distributed-lock.js';
import { LockUnavailableError } from '../errors.js';
import { type Hold, sleepUntilWoken, type StoreGrant, type StoreRelease, type WaitBudget } from '../hold.js';
import { LockClient, type LockClientOptions } from '../lock-client.js';

export interface ZooKeeperLockOptions extends LockClientOptions {
  /** `host:port[,host:port…][/chroot]` */
  connect: string;
  /** Parent of every lock's node (default /stock-locks). */
  rootPath?: string;
  /** The session timeout asked for; the server clamps it to its min/max. It is the lease: default the TTL. */
  sessionTimeoutMs?: number;
  /** Budget of one ZooKeeper call (default 3 s). */
  operationTimeoutMs?: number;
}

type Client = ZooKeeperClient.Client;

interface NodeHandle {
  path: string;
  client: Client;
}

/**
 * The client library, loaded when a ZooKeeper lock is made rather than with this module: an instance on another
 * backend never pays for its memory (docs/locks.md, "ZooKeeper").
 */
const loadClientLibrary = () => createRequire(import.meta.url)('node-zookeeper-client') as typeof ZooKeeperClient;

/** Longest sleep between two looks at the queue, in case a watch is lost with a reconnect. */
const MAX_WATCH_MS = 1_000;

/**
 * The ZooKeeper lock (Curator's recipe): each contender creates an ephemeral sequential node under the lock's node; the
 * lowest holds the lock, every other watches only its predecessor, so waiting is FIFO and a release wakes one waiter.
 * The lease is the session: when it expires ZooKeeper deletes the node. Re-entries are counted locally. Fencing: the
 * lock's node stores the last token (on disk); the new holder writes max(last + 1, clock in µs) by compare-and-set.
 */
export class ZooKeeperLock extends LockClient<NodeHandle> {
  readonly kind = 'zookeeper' as const;
  readonly capabilities: LockCapabilities = { fair: true, retakes: false };
  /** A release deletes the holder's node, which wakes the next in line through its watch. */
  protected override readonly announcesReleases = true;
  private readonly rootPath: string;
  private readonly sessionTimeoutMs: number;
  private readonly operationTimeoutMs: number;
  private session: Promise<Client> | undefined;
  private readonly knownDirs = new Set<string>();
  private closing = false;
  private readonly zookeeper = loadClientLibrary();

  constructor(private readonly options: ZooKeeperLockOptions) {
    super(options);
    this.rootPath = options.rootPath ?? '/stock-locks';
    this.sessionTimeoutMs = options.sessionTimeoutMs ?? this.defaults.ttlMs;
    this.operationTimeoutMs = options.operationTimeoutMs ?? 3_000;
  }

  protected async tryStore(key: string, owner: string): Promise<StoreGrant<NodeHandle> | null> {
    // Someone is in line already: tell so at the cost of one read, rather than queue a node only to take it back
    // (which would also make other callers' attempts fail while it exists).
    const known = this.dirOf(key);
    if (this.knownDirs.has(known) && (await this.sortedChildren(await this.connected(), known)).length > 0) return null;
    const { client, dir, path } = await this.enqueue(key, owner);
    try {
      const requestedAt = Date.now();
      const children = await this.sortedChildren(client, dir);
      if (children[0] !== posix.basename(path)) {
        await this.removeNode(client, path);
        return null;
      }
      return await this.grant(client, dir, path, requestedAt);
    } catch (error) {
      await this.removeNode(client, path).catch(() => {});
      throw error;
    }
  }

  protected override async waitStore(key: string, owner: string, _ttlMs: number, budget: WaitBudget) {
    const { client, dir, path } = await this.enqueue(key, owner);
    try {
      for (;;) {
        const requestedAt = Date.now();
        const children = await this.sortedChildren(client, dir);
        const index = children.indexOf(posix.basename(path));
        if (index < 0) throw new LockUnavailableError(key, 'the waiting node vanished: the ZooKeeper session expired');
        if (index === 0) return await this.grant(client, dir, path, requestedAt);
        const remaining = budget.deadline - Date.now();
        if (remaining <= 0) {
          await this.removeNode(client, path);
          return null;
        }
        const sleep = sleepUntilWoken(Math.min(remaining, MAX_WATCH_MS), budget.signal);
        const predecessor = await this.call<ZooKeeperClient.Stat | null>(client, (done) =>
          client.exists(posix.join(dir, children[index - 1]!), () => sleep.wake(), done),
        );
        if (!predecessor) sleep.wake();
        await sleep.promise;
      }
    } catch (error) {
      await this.removeNode(client, path).catch(() => {});
      throw error;
    }
  }

  /** Re-entries are counted locally: only check that the node is still ours. */
  protected reenterStore(hold: Hold<NodeHandle>): Promise<boolean> {
    return this.extendStore(hold);
  }

  protected async releaseStore(hold: Hold<NodeHandle>, final: boolean): Promise<StoreRelease> {
    if (!final) return 'released';
    const { client, path } = hold.handle!;
    if (!(await this.ownsNode(client, path))) return 'lost';
    await this.removeNode(client, path);
    return 'released';
  }

  /** The session's heartbeats are the renewal: this only confirms the node still belongs to our live session. */
  protected async extendStore(hold: Hold<NodeHandle>): Promise<boolean> {
    const { client, path } = hold.handle!;
    if ((await this.session?.catch(() => undefined)) !== client) return false;
    return this.ownsNode(client, path);
  }

  protected async closeStore(): Promise<void> {
    this.closing = true;
    const client = await this.session?.catch(() => undefined);
    this.session = undefined;
    client?.close();
  }

  private async enqueue(key: string, owner: string): Promise<{ client: Client; dir: string; path: string }> {
    const client = await this.connected();
    const dir = this.dirOf(key);
    if (!this.knownDirs.has(dir)) {
      await this.call<string>(client, (done) => client.mkdirp(dir, done));
      this.knownDirs.add(dir);
    }
    // The owner in the name finds the node again should the create's reply be lost.
    const path = await this.call<string>(client, (done) =>
      client.create(
        posix.join(dir, `${owner}-lock-`),
        Buffer.alloc(0),
        this.zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL,
        done,
      ),
    );
    return { client, dir, path };
  }

  private dirOf(key: string): string {
    return posix.join(this.rootPath, encodeURIComponent(key));
  }

  private async grant(client: Client, dir: string, path: string, requestedAt: number): Promise<StoreGrant<NodeHandle>> {
    const fence = await this.issueFence(client, dir);
    return { fence, leaseMs: client.getSessionTimeout(), requestedAt, handle: { client, path } };
  }

  private async issueFence(client: Client, dir: string): Promise<number> {
    for (let attempt = 0; attempt < 10; attempt++) {
      const [data, stat] = await this.call<[Buffer | null, ZooKeeperClient.Stat]>(client, (done) =>
        client.getData(dir, (error, value, stat) => done(error, [value, stat])),
      );
      const last = Number(data?.toString() || '0');
      const fence = Math.max(last + 1, nowMicros());
      try {
        await this.call(client, (done) => client.setData(dir, Buffer.from(String(fence)), stat.version, done));
        return fence;
      } catch (error) {
        // A lapsed holder raced us for the counter: read it again.
        if (codeOf(error) !== this.zookeeper.Exception.BAD_VERSION) throw error;
      }
    }
    throw new LockUnavailableError(dir, 'the fencing counter kept changing under a compare-and-set');
  }

  private async sortedChildren(client: Client, dir: string): Promise<string[]> {
    const children = await this.call<string[]>(client, (done) =>
      client.getChildren(dir, (error, names) => done(error, names)),
    );
    return children.filter((name) => /-lock-\d{10}$/.test(name)).sort((a, b) => sequenceOf(a) - sequenceOf(b));
  }

  private async ownsNode(client: Client, path: string): Promise<boolean> {
    const stat = await this.call<ZooKeeperClient.Stat | null>(client, (done) => client.exists(path, done));
    return stat?.ephemeralOwner.equals(client.getSessionId()) ?? false;
  }

  private async removeNode(client: Client, path: string): Promise<void> {
    try {
      await this.call(client, (done) => client.remove(path, -1, done));
    } catch (error) {
      if (codeOf(error) !== this.zookeeper.Exception.NO_NODE) throw error;
    }
  }

  /** The current session; a new one after the last expired (its holds are reported lost). */
  private connected(): Promise<Client> {
    if (this.closing) return Promise.reject(new LockUnavailableError('*', 'the ZooKeeper lock client is closed'));
    if (!this.session) {
      const client = this.zookeeper.createClient(this.options.connect, {
        sessionTimeout: this.sessionTimeoutMs,
        spinDelay: 100,
        retries: 0,
      });
      const session = new Promise<Client>((resolve, reject) => {
        const detail = `no ZooKeeper session at ${this.options.connect} within ${this.operationTimeoutMs} ms`;
        const timer = setTimeout(() => {
          client.close();
          reject(new LockUnavailableError('*', detail));
        }, this.operationTimeoutMs);
        client.once('connected', () => {
          clearTimeout(timer);
          resolve(client);
        });
      });
      const abandon = (reason: string) => {
        clearTimeout(disconnectedTimer);
        if (this.session === session) this.session = undefined;
        this.knownDirs.clear();
        client.close();
        this.loseAll(reason, (hold) => hold.handle?.client === client);
      };
      // Disconnected for a whole session timeout: the server has expired the session, or will; start a new one.
      let disconnectedTimer: NodeJS.Timeout | undefined;
      client.on('disconnected', () => {
        clearTimeout(disconnectedTimer);
        disconnectedTimer = setTimeout(
          () => abandon('its ZooKeeper connection was down for a whole session timeout'),
          this.sessionTimeoutMs,
        );
        disconnectedTimer.unref();
      });
      client.on('connected', () => clearTimeout(disconnectedTimer));
      client.on('expired', () => abandon('its ZooKeeper session expired'));
      client.connect();
      this.session = session;
      session.catch(() => {
        if (this.session === session) this.session = undefined;
      });
    }
    return this.session;
  }

  /**
   * A ZooKeeper call as a promise, bounded in time. None is sent while disconnected: node-zookeeper-client does not
   * reconnect once requests are queued on a dropped connection.
   */
  private call<T = unknown>(
    client: Client,
    start: (done: (error: Error | ZooKeeperClient.Exception | null, value?: T) => void) => void,
  ): Promise<T> {
    if (client.getState() !== this.zookeeper.State.SYNC_CONNECTED) {
      return Promise.reject(new LockUnavailableError('*', 'not connected to ZooKeeper'));
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new LockUnavailableError('*', `ZooKeeper did not answer within ${this.operationTimeoutMs} ms`)),
        this.operationTimeoutMs,
      );
      start((error, value) => {
        clearTimeout(timer);
        if (error) reject(error);
        else resolve(value as T);
      });
    });
  }
}

const sequenceOf = (name: string) => Number(name.slice(-10));
const codeOf = (error: unknown) => (error as { code?: number }).code;
const nowMicros = () => Math.floor((performance.timeOrigin + performance.now()) * 1000);
