import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from '../../../src/dev/free-port.js';
import { MissingDependencyError, stopAtExit } from '../../../src/dev/servers/server-process.js';
import { waitFor } from '../wait-for.js';

/** Debian's postgresql-15 binaries, which pg_autoctl (Debian's pg-auto-failover-cli) drives. */
const PG_BIN = '/usr/lib/postgresql/15/bin';
const PG_AUTOCTL = '/usr/bin/pg_autoctl';
const READY_WITHIN_MS = 120_000;
const DATABASE = 'stock';
const USER = 'stock';

/**
 * The monitor's settings for quick failovers: a node is checked every second and counted unhealthy after 3 s
 * without an answer; a promoted standby takes writes once the old primary reported itself demoted, or 5 s after it
 * went silent (30 s by default: the time a cut-off primary has to notice and stop taking writes on its own).
 */
export const MONITOR_SETTINGS: Record<string, number> = {
  'pgautofailover.health_check_period': 1_000,
  'pgautofailover.node_considered_unhealthy_timeout': 3_000,
  'pgautofailover.primary_demote_timeout': 5_000,
};

/** Why a formation cannot be started here, or undefined when it can (callers skip or fail on it). */
export function pgAutoFailoverMissing(): string | undefined {
  if (!existsSync(PG_AUTOCTL)) return `${PG_AUTOCTL} not found (apt-get install pg-auto-failover-cli)`;
  if (!existsSync(path.join(PG_BIN, 'pg_ctl'))) return `${PG_BIN}/pg_ctl not found (apt-get install postgresql-15)`;
  const extension = '/usr/share/postgresql/15/extension/pgautofailover.control';
  if (!existsSync(extension)) return `${extension} not found (apt-get install postgresql-15-auto-failover)`;
  return undefined;
}

/** The account pg_autoctl runs as: Postgres refuses root, so as root the Debian packages' `postgres` user. */
function runAs(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
  const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
  return { uid, gid };
}

/** One `pg_autoctl … --run` process (a monitor or a Postgres node) and the Postgres it keeps running. */
export class PgAutoctlNode {
  private process: ChildProcess | undefined;
  private output = '';
  private unregister: (() => void) | undefined;

  constructor(
    readonly name: string,
    readonly port: number,
    readonly pgdata: string,
    private readonly formation: PgAutoFailoverFormation,
  ) {}

  /** Starts `pg_autoctl <args> --run`: the first time creates the node, later times run it again. */
  start(args: string[]): void {
    const child = spawn(PG_AUTOCTL, [...args, '--run'], {
      cwd: this.formation.dir,
      env: this.formation.env,
      ...runAs(),
      // A group of its own, so a stop reaches its supervisor and every process it started.
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (chunk: Buffer) => (this.output = (this.output + chunk.toString()).slice(-8_000));
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    child.on('error', (error) => keep(Buffer.from(String(error))));
    this.process = child;
    this.unregister = stopAtExit(() => signalTree(child.pid!, 'SIGKILL'));
  }

  /** pg_autoctl's last lines, for the error when a start fails. */
  get log(): string {
    return this.output;
  }

  /** A connection to this node's Postgres as the database owner (`stock`), or to `database` as `postgres`. */
  url(database = DATABASE, user = USER): string {
    return `postgres://${user}@127.0.0.1:${this.port}/${database}`;
  }

  /** The machine under the node dies: pg_autoctl, the Postgres it runs and every backend, all by SIGKILL at once. */
  kill(): Promise<void> {
    return this.stop('SIGKILL');
  }

  /** SIGTERM: pg_autoctl stops its Postgres and exits. SIGKILL: every process of the node dies at once. */
  async stop(signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
    const child = this.process;
    if (!child?.pid || child.exitCode !== null || child.signalCode !== null) return;
    this.process = undefined;
    const exited = onceExit(child);
    const signalled = signalTree(child.pid, signal);
    await exited;
    // Backends of a killed postmaster may outlive it a moment; a restart needs the port free.
    await waitFor(() => signalled.every((pid) => !alive(pid)), 10_000, 50);
    this.unregister?.();
  }
}

/** Signals `root` (and, for SIGKILL, every process below it, found first); returns the processes signalled. */
function signalTree(root: number, signal: NodeJS.Signals): number[] {
  // Postgres's backends lead process groups of their own: a signal to pg_autoctl's group would miss them.
  const pids = signal === 'SIGKILL' ? [root, ...descendants(root)] : [root];
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      // Already gone.
    }
  }
  return pids;
}

function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/s.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/**
 * A pg_auto_failover formation on loopback: a monitor and two Postgres nodes, the second a synchronous standby of the
 * first (the formation's default: `synchronous_standby_names = 'ANY 1 (…)'`, so every commit the primary answers is
 * on the standby too). Run by pg_autoctl as in production, with the monitor's checks tightened (MONITOR_SETTINGS).
 * `start()` returns once the standby is `secondary`, so a failover can promote it at once.
 */
export class PgAutoFailoverFormation {
  readonly dir: string;
  readonly env: NodeJS.ProcessEnv;
  monitor!: PgAutoctlNode;
  readonly nodes: PgAutoctlNode[] = [];

  private constructor() {
    this.dir = mkdtempSync(path.join(tmpdir(), 'stock-pg-auto-failover-'));
    const account = runAs();
    if (account) chownSync(this.dir, account.uid, account.gid);
    this.env = {
      PATH: `${PG_BIN}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      HOME: this.dir,
      // pg_autoctl keeps its configuration and state files under these: inside the formation's directory.
      XDG_CONFIG_HOME: path.join(this.dir, 'config'),
      XDG_DATA_HOME: path.join(this.dir, 'share'),
      LANG: 'C.UTF-8',
    };
  }

  static async start(): Promise<PgAutoFailoverFormation> {
    const missing = pgAutoFailoverMissing();
    if (missing) throw new MissingDependencyError(`cannot start pg_auto_failover: ${missing}`);
    const formation = new PgAutoFailoverFormation();
    try {
      await formation.startMonitor();
      await formation.addNode('node1', ['single', 'primary']);
      await formation.addNode('node2', ['secondary']);
      return formation;
    } catch (error) {
      await formation.destroy();
      throw error;
    }
  }

  /** The multi-host URI a service is given: every node, the first one listed first, read-write wanted. */
  uri(order: PgAutoctlNode[] = this.nodes): string {
    const hosts = order.map((node) => `127.0.0.1:${node.port}`).join(',');
    return `postgres://${USER}@${hosts}/${DATABASE}?target_session_attrs=read-write`;
  }

  /** Each node's name, reported state and the state the monitor assigned. */
  async states(): Promise<{ name: string; reported: string; assigned: string }[]> {
    const { rows } = await this.onMonitor<{ name: string; reported: string; assigned: string }>(
      'select nodename as name, reportedstate::text as reported, goalstate::text as assigned from pgautofailover.node order by nodeid',
    );
    return rows;
  }

  /** True when the node's Postgres answers and takes writes now. */
  async writable(node: PgAutoctlNode): Promise<boolean> {
    const client = new pg.Client({ connectionString: node.url(), connectionTimeoutMillis: 1_000 });
    client.on('error', () => {});
    try {
      await client.connect();
      const { rows } = await client.query<{ read_only: string }>(
        "select current_setting('transaction_read_only') as read_only",
      );
      return rows[0]!.read_only === 'off';
    } catch {
      return false;
    } finally {
      await client.end().catch(() => {});
    }
  }

  /** A planned switchover: the monitor demotes the primary and promotes the standby; resolves when it is done. */
  async switchover(): Promise<void> {
    // The monitor refuses a switchover until it sees a primary: right after the standby joins, the first node may
    // still be passing through wait_primary.
    const settled = () =>
      this.states().then((nodes) =>
        ['primary', 'secondary'].every((state) => nodes.some((n) => n.reported === state && n.assigned === state)),
      );
    if ((await waitFor(settled, READY_WITHIN_MS, 200)) === Infinity) {
      throw new Error(`no primary and secondary to switch over: ${JSON.stringify(await this.states())}`);
    }
    await this.autoctl(['perform', 'switchover', '--pgdata', this.monitor.pgdata, '--formation', 'default'], 120_000);
  }

  async destroy(): Promise<void> {
    await Promise.allSettled([...this.nodes, this.monitor].filter(Boolean).map((node) => node.kill()));
    rmSync(this.dir, { recursive: true, force: true });
  }

  private async startMonitor(): Promise<void> {
    const port = await freePort();
    const monitor = new PgAutoctlNode('monitor', port, path.join(this.dir, 'monitor'), this);
    this.monitor = monitor;
    monitor.start([
      'create',
      'monitor',
      ...['--pgdata', monitor.pgdata, '--pgport', String(port), '--hostname', '127.0.0.1'],
      ...['--auth', 'trust', '--no-ssl', '--pgctl', path.join(PG_BIN, 'pg_ctl')],
    ]);
    const up = await waitFor(
      () =>
        this.onMonitor('select 1 from pgautofailover.formation').then(
          () => true,
          () => false,
        ),
      READY_WITHIN_MS,
      200,
    );
    if (up === Infinity) throw new Error(`the monitor did not start within 120 s:\n${monitor.log}`);
    for (const [name, value] of Object.entries(MONITOR_SETTINGS)) {
      await this.onMonitor(`alter system set ${name} = ${value}`);
    }
    await this.onMonitor('select pg_reload_conf()');
  }

  /** Creates and runs a Postgres node, and waits until the monitor reports it in one of `until`. */
  private async addNode(name: string, until: string[]): Promise<void> {
    const port = await freePort();
    const node = new PgAutoctlNode(name, port, path.join(this.dir, name), this);
    this.nodes.push(node);
    node.start([
      'create',
      'postgres',
      ...['--pgdata', node.pgdata, '--pgport', String(port), '--hostname', '127.0.0.1', '--listen', '127.0.0.1'],
      ...['--name', name, '--dbname', DATABASE, '--username', USER, '--auth', 'trust', '--no-ssl'],
      ...['--monitor', `${this.monitor.url('pg_auto_failover', 'autoctl_node')}?sslmode=disable`],
      ...['--pgctl', path.join(PG_BIN, 'pg_ctl')],
    ]);
    const reached = await waitFor(
      async () => {
        const state = (await this.states().catch(() => [])).find((s) => s.name === name);
        if (state && until.includes(state.reported) && state.reported === state.assigned) return true;
        // pg_basebackup waits for a checkpoint, spread over minutes by default: ask the primary for one now.
        if (this.nodes[0] !== node) await this.onNode(this.nodes[0]!, 'checkpoint').catch(() => {});
        return false;
      },
      READY_WITHIN_MS,
      500,
    );
    if (reached === Infinity) throw new Error(`${name} did not reach ${until.join('/')} within 120 s:\n${node.log}`);
  }

  private async onMonitor<Row extends object>(text: string): Promise<pg.QueryResult<Row>> {
    return this.onNode(this.monitor, text, 'pg_auto_failover');
  }

  private async onNode<Row extends object>(
    node: PgAutoctlNode,
    text: string,
    database = DATABASE,
  ): Promise<pg.QueryResult<Row>> {
    const client = new pg.Client({ connectionString: node.url(database, 'postgres'), connectionTimeoutMillis: 2_000 });
    client.on('error', () => {});
    try {
      await client.connect();
      return await client.query<Row>(text);
    } finally {
      await client.end().catch(() => {});
    }
  }

  private async autoctl(args: string[], timeoutMs: number): Promise<string> {
    const { stdout, stderr } = await promisify(execFile)(PG_AUTOCTL, args, {
      cwd: this.dir,
      env: this.env,
      timeout: timeoutMs,
      ...runAs(),
    });
    return `${stdout}${stderr}`;
  }
}

function onceExit(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** Every process below `root`, read from /proc. */
function descendants(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The parent is the second field after the command, which is in parentheses and may contain spaces.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
    } catch {
      // Gone meanwhile.
    }
  }
  const found: number[] = [];
  const walk = (pid: number) => {
    for (const child of children.get(pid) ?? []) {
      found.push(child);
      walk(child);
    }
  };
  walk(root);
  return found;
}
