/**
 * Every case of a run, as one table: which scenario it belongs to, which service it needs, where its result goes,
 * and how it is measured. The rows run in order, so that one service is busy at a time: the shipped service first,
 * its variants next, the cluster last; the ceiling is measured first and last to show drift. A service starts on
 * the first row that needs it and stops after the last.
 */
import { randomBytes } from 'node:crypto';
import { SignJWT } from 'jose';
import type { LockBackendKind } from '../../src/lock/distributed-lock.js';
import { AUDIENCE, bearer, ISSUER, serviceKey, writeKeysFile } from '../../test/security/credentials.js';
import { zookeeperMissing } from '../../test/support/servers/index.js';
import { ServerStats } from '../infra/server-stats.js';
import { LocalService, type LocalServiceOptions, type ServiceTarget } from '../infra/service-process.js';
import type { DashboardCase, GrowthCase, LifecycleCase, OversellCase, SoldOutCase } from './cases.js';
import { guards, runDashboardCost, runGrowth, runLifecycle, runOversell, runSoldOut } from './cases.js';
import type { RunContext } from './context.js';
import { backendContender, type LockCell, libraryContender, runCell } from './locks.js';
import {
  type CeilingCase,
  measureCeiling,
  measureSales,
  primeService,
  type SalesCase,
  type SalesSpec,
} from './sales.js';

export const scenarioNames = [
  'ceiling',
  'segments',
  'alternative',
  'spread',
  'bare-echo',
  'business-step',
  'cluster',
  'oversell',
  'sold-out',
  'lifecycle',
  'dashboard',
  'per-order',
  'lock-free',
  'memory',
  'growth',
  'auth',
  'locks',
  'lock-backends',
  'lock-order-flow',
] as const;
export type ScenarioName = (typeof scenarioNames)[number];
/** Run only when named: they start servers beyond the run's own (Redlock's three nodes, ZooKeeper). */
export const namedOnly: ScenarioName[] = ['lock-backends', 'lock-order-flow'];

/** Segment count of the segmented cases the targets are judged at (reference article 002: 20 segments). */
export const HEADLINE_SEGMENTS = 20;
/** Attempts per case when the service under test disappears beneath it (e.g. killed from outside). */
const ATTEMPTS_PER_CASE = 3;

export const emptyCases = () => ({
  ceiling: [] as CeilingCase[],
  segments: [] as SalesCase[],
  cluster: [] as SalesCase[],
  oversell: [] as OversellCase[],
  soldOut: [] as SoldOutCase[],
  lifecycle: [] as LifecycleCase[],
  /** What an order costs each server, on one Redis and on a Redis Cluster, with combining on and off. */
  perOrder: [] as SalesCase[],
  lockFree: [] as SalesCase[],
  /** What a user would write instead (loadtest/alternative), on one hot SKU and on spread and mixed traffic. */
  alternative: [] as SalesCase[],
  spread: [] as SalesCase[],
  bareEcho: [] as CeilingCase[],
  dashboard: [] as DashboardCase[],
  memory: [] as SalesCase[],
  growth: [] as GrowthCase[],
  /** The hot SKU's orders with no credential, a service key and a customer token. */
  auth: [] as SalesCase[],
  /** The lock alone: this lock against the libraries, and on each backend. */
  locks: [] as LockCell[],
  /** The service's order flow on each lock backend. */
  lockOrderFlow: [] as SalesCase[],
  /** Scenarios not run, and why; services that died during a case (the case was repeated on a fresh one). */
  skipped: [] as { scenario: string; reason: string }[],
  incidents: [] as string[],
});
export type RunCases = ReturnType<typeof emptyCases>;
type CaseList = Exclude<keyof RunCases, 'skipped' | 'incidents'>;

/** A service a row needs: started from its options, on the run's Redis unless it asks for a Redis Cluster. */
interface ServiceSpec extends LocalServiceOptions {
  onRedisCluster?: boolean;
  lockBackend?: LockBackendKind;
}

interface Row {
  scenario: ScenarioName;
  into: CaseList;
  service?: ServiceSpec;
  /** Why this run cannot measure the row, beyond its service. */
  unless?: (ctx: RunContext) => string | undefined;
  run(ctx: RunContext, service: ServiceTarget): Promise<unknown>;
}

const COMBINING_OFF = { COMBINE_MAX_BATCH: '1' };
const lockName = (segments: number) => (segments === 1 ? 'single lock' : `${segments} segments`);
const pct = (share: number) => `${Math.round(share * 100)} %`;

/** The rows of a run with these settings. */
function plan(ctx: RunContext): Row[] {
  const s = ctx.settings;
  const n = HEADLINE_SEGMENTS;
  const real: ServiceSpec = { label: 'service (real critical section)' };
  const uncombined: ServiceSpec = { label: 'real-uncombined', env: COMBINING_OFF };
  const step = { CRITICAL_SECTION_DELAY_MS: String(s.businessStepMs) };
  const cluster: ServiceSpec = {
    label: `${s.clusterInstances} instances behind one port`,
    instances: s.clusterInstances,
  };
  const alternative: ServiceSpec = {
    label: 'the alternative (express + pg, one conditional UPDATE)',
    program: 'alternative',
  };
  const endpoints = s.segmentCounts.filter((k) => k === 1 || k === n);
  const rows: Row[] = [];
  const add = <K extends CaseList>(
    scenario: ScenarioName,
    into: K,
    service: ServiceSpec | undefined,
    run: (ctx: RunContext, service: ServiceTarget) => Promise<RunCases[K][number] | RunCases[K][number][]>,
    unless?: Row['unless'],
  ) => rows.push({ scenario, into, service, run, unless });
  const sales = (scenario: ScenarioName, into: CaseList, service: ServiceSpec, spec: Omit<SalesSpec, 'service'>) =>
    add(scenario, into, service, (c, target) => measureSales(c, { ...spec, service: target }));
  /** One row of a segment-count comparison. */
  const orders = (
    scenario: ScenarioName,
    service: ServiceSpec,
    profile: 'real' | 'business-step',
    combining: boolean,
    segments: number,
  ) =>
    sales(scenario, 'segments', service, {
      id: `${profile === 'real' ? 'real' : 'step'}-${segments}${combining ? '' : '-uncombined'}`,
      label: `${profile === 'real' ? 'real' : `${s.businessStepMs} ms step`} · ${lockName(segments)}${combining ? '' : ' · combining off'}`,
      profile,
      combining,
      segments,
    });
  const ceiling = (id: string, label: string) =>
    add('ceiling', 'ceiling', real, (c, service) => measureCeiling(c, { id, label, service, instances: 1 }));

  ceiling('ceiling-first', 'HTTP ceiling (first)');
  for (const segments of s.segmentCounts) orders('segments', real, 'real', true, segments);
  for (const segments of endpoints) orders('segments', uncombined, 'real', false, segments);

  for (const redis of ['one Redis', 'Redis Cluster']) {
    const onRedisCluster = redis !== 'one Redis';
    const combined = onRedisCluster ? { label: 'real-redis-cluster', onRedisCluster } : real;
    for (const [service, segments] of [
      [combined, 1],
      [combined, n],
      [onRedisCluster ? { ...uncombined, label: 'real-uncombined-redis-cluster', onRedisCluster } : uncombined, n],
    ] as const) {
      const combining = service !== uncombined && !service.env;
      add('per-order', 'perOrder', service, async (c, target) => {
        const nodes = onRedisCluster ? (await c.backing!.redisCluster()).redisNodes : c.backing!.redisNodes;
        const serverStats = await ServerStats.open(nodes, c.db);
        const label = `${redis} · ${lockName(segments)}${combining ? '' : ' · combining off'}`;
        const id = `per-order-${onRedisCluster ? 'redis-cluster-' : ''}${combining ? '' : 'uncombined-'}${segments}`;
        return measureSales(c, {
          id,
          label,
          service: target,
          combining,
          segments,
          serverStats,
          tags: { redis },
        }).finally(() => serverStats.close());
      });
    }
  }

  add('bare-echo', 'bareEcho', { label: 'a bare express JSON echo', program: 'echo' }, (c, service) =>
    measureCeiling(c, {
      id: 'bare-echo',
      label: 'bare express JSON echo (POST /orders → 201)',
      service,
      instances: 1,
      path: '/orders',
      status: 201,
    }),
  );
  const shapes = [
    { scenario: 'alternative', id: 'hot', name: 'one hot SKU', traffic: undefined },
    {
      scenario: 'spread',
      id: 'spread',
      name: `spread over ${s.spreadSkus} SKUs`,
      traffic: { skus: s.spreadSkus, hotShare: 0 },
    },
    {
      scenario: 'spread',
      id: 'mixed',
      name: `mixed: ${pct(1 - s.mixedHotShare)} spread over ${s.spreadSkus} SKUs, ${pct(s.mixedHotShare)} one hot SKU`,
      traffic: { skus: s.spreadSkus, hotShare: s.mixedHotShare },
    },
  ] as const;
  for (const { scenario, id, name, traffic } of shapes) {
    const spec = {
      id: `alternative-${id}`,
      label: `the alternative · ${name}`,
      segments: 1,
      traffic,
      lockMetrics: false,
      auditInPostgres: false,
    };
    sales(scenario, 'alternative', alternative, spec);
  }
  for (const { id, name, traffic } of shapes.slice(1)) {
    sales('spread', 'spread', real, {
      id: `real-${id}`,
      label: `real · ${lockName(n)} · ${name}`,
      segments: n,
      traffic,
    });
  }

  // The sweep without combining shows what segmenting alone buys; then combining on, at the endpoints.
  for (const segments of s.segmentCounts)
    orders(
      'business-step',
      { label: `${s.businessStepMs} ms business step, combining off`, env: { ...step, ...COMBINING_OFF } },
      'business-step',
      false,
      segments,
    );
  for (const segments of endpoints)
    orders(
      'business-step',
      { label: `${s.businessStepMs} ms business step`, env: step },
      'business-step',
      true,
      segments,
    );

  add('sold-out', 'soldOut', real, (c, service) => runSoldOut(c, service, n));
  add('lifecycle', 'lifecycle', real, (c, service) => runLifecycle(c, service, n));
  add('dashboard', 'dashboard', real, (c, service) => runDashboardCost(c, service, n, s.dashboardWatchers));
  for (const [id, label, path, segments] of [
    ['pg-row', 'Postgres conditional UPDATE, 1 row', '/bench/lock-free/pg-conditional', 1],
    ['pg-rows', `Postgres conditional UPDATE, ${n} rows`, '/bench/lock-free/pg-conditional', n],
    ['redis-counter', 'Redis Lua counter + Postgres ledger', '/bench/lock-free/redis-counter', 1],
  ] as const) {
    const stockIn = id === 'redis-counter' ? 'redis-counter' : 'segments';
    sales('lock-free', 'lockFree', real, {
      id,
      label: `lock-free · ${label}`,
      path,
      segments,
      combining: false,
      stockIn,
    });
  }
  const memory = s.memoryConnections;
  sales('memory', 'memory', real, {
    id: `memory-${memory}`,
    label: `real · ${n} segments · ${memory} connections`,
    segments: n,
    connections: memory,
  });
  add(
    'growth',
    'growth',
    real,
    (c, service) => runGrowth(c, c.db!, service, n),
    (c) => (c.backing && c.db ? undefined : 'seeding a long ledger needs the Postgres of a service this run starts'),
  );

  add('oversell', 'oversell', real, (c, service) => runOversell(c, service, 1, guards.localMutex));
  add('cluster', 'ceiling', cluster, (c, service) =>
    measureCeiling(c, {
      id: 'ceiling-cluster',
      label: `HTTP ceiling · ${s.clusterInstances} instances`,
      service,
      instances: s.clusterInstances,
    }),
  );
  for (const segments of s.clusterSegmentCounts) {
    const label = `${s.clusterInstances} instances · ${lockName(segments)}`;
    sales('cluster', 'cluster', cluster, { id: `cluster-${segments}`, label, instances: s.clusterInstances, segments });
  }
  for (const guard of Object.values(guards)) {
    add('oversell', 'oversell', cluster, (c, service) => runOversell(c, service, s.clusterInstances, guard));
  }

  // What authentication costs an order: the same hot-SKU load with no credential, a service key and a customer token.
  const key = serviceKey('loadtest', ['orders:place']);
  const adminToken = randomBytes(24).toString('hex');
  const jwtSecret = randomBytes(32).toString('hex');
  const customerToken = () =>
    new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('loadtest-customer')
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setIssuedAt()
      .setExpirationTime('12h')
      .sign(new TextEncoder().encode(jwtSecret));
  const credentials = [
    { id: 'none', name: 'no credential (open mode)', service: real, headers: async () => ({}) },
    {
      id: 'key',
      name: 'service key',
      service: {
        label: 'service with API_KEYS_FILE',
        env: { ADMIN_TOKEN: adminToken, API_KEYS_FILE: writeKeysFile([key]) },
      },
      headers: async () => bearer(key.key),
    },
    {
      id: 'token',
      name: 'customer token (HS256 JWT)',
      service: {
        label: 'service with a customer issuer',
        env: {
          ADMIN_TOKEN: adminToken,
          CUSTOMER_JWT_SECRET: jwtSecret,
          CUSTOMER_JWT_ISSUER: ISSUER,
          CUSTOMER_JWT_AUDIENCE: AUDIENCE,
        },
      },
      headers: async () => bearer(await customerToken()),
    },
  ];
  for (const { id, name, service, headers } of credentials) {
    add('auth', 'auth', service, async (c, target) =>
      measureSales(c, {
        id: `auth-${id}`,
        label: `real · ${lockName(n)} · ${name}`,
        service: target,
        segments: n,
        headers: await headers(),
        tags: { auth: id },
      }),
    );
  }

  const cells = (
    scenario: ScenarioName,
    contenders: {
      name: string;
      open: (c: RunContext) => ReturnType<typeof backendContender>;
      unless?: Row['unless'];
    }[],
  ) => {
    for (const keys of s.lockKeys)
      for (const holdMs of s.lockHoldsMs)
        for (const contender of contenders) {
          const spec = {
            workers: s.lockWorkers,
            keys,
            holdMs,
            warmupMs: s.lockWarmupSeconds * 1000,
            durationMs: s.lockMeasureSeconds * 1000,
          };
          add(
            scenario,
            'locks',
            undefined,
            async (c) => {
              c.progress.note(`K=${keys} H=${holdMs} ms ${contender.name}…`);
              return runCell(await contender.open(c), spec);
            },
            (c) => needsOwnServers(c) ?? contender.unless?.(c),
          );
        }
  };
  const runId = Date.now().toString(36);
  cells(
    'locks',
    s.lockContenders.map((name) => ({
      name,
      open: async (c) => libraryContender(name, s.lockRedisUrl || (await c.backing!.lockRedis()).url, runId),
    })),
  );
  cells(
    'lock-backends',
    s.lockBackends.map((kind) => ({
      name: `backend:${kind}`,
      open: (c) => backendContender(kind, c.backing!, runId),
      unless: () => (kind === 'zookeeper' ? zookeeperMissing() : undefined),
    })),
  );
  for (const holdMs of s.lockHoldsMs) {
    const variants = s.lockBackends.map((kind) => ({ kind, dead: false }));
    if (s.deadLockNode && s.lockBackends.includes('redlock')) variants.push({ kind: 'redlock', dead: true });
    for (const { kind, dead } of variants) {
      const env = { CRITICAL_SECTION_DELAY_MS: String(holdMs), LOCK_WAIT_MS: String(s.lockWaitMs), PG_POOL_SIZE: '40' };
      const service = { label: `service on the ${kind} lock backend, ${holdMs} ms step`, env, lockBackend: kind };
      add(
        'lock-order-flow',
        'lockOrderFlow',
        service,
        async (c, target) => {
          const node = await c.backing!.redlockNodes[0]!();
          if (dead) await node.stop();
          const variant = dead ? ', one node of three killed' : '';
          const label = `order flow · ${kind}${variant} · ${holdMs} ms step`;
          const tags = { lockBackend: `${kind}${variant}`, holdMs };
          return measureSales(c, {
            id: `order-flow-${kind}-${holdMs}${dead ? '-dead' : ''}`,
            label,
            service: target,
            segments: n,
            connections: s.lockWorkers,
            tags,
          }).finally(() => dead && node.resume());
        },
        () => (kind === 'zookeeper' ? zookeeperMissing() : undefined),
      );
    }
  }
  ceiling('ceiling-last', 'HTTP ceiling (last)');
  return rows;
}

const needsOwnServers = (c: RunContext) =>
  c.backing ? undefined : 'the lock benchmark starts Redis servers of its own beside the run’s';

/** Runs the rows of the selected scenarios; a row whose service or servers this run cannot have is skipped. */
export async function runPlan(
  ctx: RunContext,
  selected: ReadonlySet<ScenarioName>,
  remote: ServiceTarget | null,
  nodeArgs: string[],
): Promise<RunCases> {
  const results = emptyCases();
  const rows = plan(ctx).filter((row) => selected.has(row.scenario));
  const services = new Services(ctx, remote, nodeArgs, results.incidents);
  const skip = (scenario: string, reason: string) => {
    if (!results.skipped.some((x) => x.scenario === scenario && x.reason === reason))
      results.skipped.push({ scenario, reason });
  };
  for (const [i, row] of rows.entries()) {
    const reason = row.unless?.(ctx) ?? (row.service && services.unavailable(row.service));
    if (reason) skip(row.scenario, reason);
    else {
      const result = row.service
        ? await services.use(row.service, (service) => row.run(ctx, service))
        : await row.run(ctx, undefined!);
      (results[row.into] as unknown[]).push(...(Array.isArray(result) ? result : [result]));
    }
    // A service stops after the last row that needs it.
    if (
      row.service &&
      !rows
        .slice(i + 1)
        .some(
          (later) =>
            later.service === row.service ||
            (later.service && services.key(later.service) === services.key(row.service!)),
        )
    ) {
      await services.release(row.service);
    }
  }
  return results;
}

/**
 * The running service of each spec, started and primed on first use. A case whose service died under it is
 * repeated on a fresh one, and the incident recorded: a result is only ever taken from an uninterrupted case.
 */
class Services {
  private readonly running = new Map<string, ServiceTarget>();

  constructor(
    private readonly ctx: RunContext,
    private readonly remote: ServiceTarget | null,
    private readonly nodeArgs: string[],
    private readonly incidents: string[],
  ) {}

  key(spec: ServiceSpec): string {
    return JSON.stringify(spec);
  }

  unavailable(spec: ServiceSpec): string | undefined {
    const backing = this.ctx.backing;
    if (!backing)
      return this.key(spec) === this.key({ label: 'service (real critical section)' })
        ? undefined
        : `${spec.label}: a service this run starts; a --url target is measured as it is`;
    if (spec.onRedisCluster && 'REDIS_CLUSTER_NODES' in backing.redisEnv)
      return 'a run on a Redis Cluster has no one Redis to compare it with';
  }

  async use<T>(spec: ServiceSpec, measure: (service: ServiceTarget) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const service = await this.get(spec);
      try {
        return await measure(service);
      } catch (error) {
        if (service.alive() || attempt >= ATTEMPTS_PER_CASE) throw error;
        const note = `${service.diagnostics().split('\n')[0]} during a case (${(error as Error).message.split('\n')[0]}); started a fresh one and repeated the case`;
        this.incidents.push(note);
        this.ctx.progress.note(note);
        await this.release(spec);
      }
    }
  }

  async release(spec: ServiceSpec): Promise<void> {
    const service = this.running.get(this.key(spec));
    this.running.delete(this.key(spec));
    if (service && service !== this.remote) {
      this.ctx.started.delete(service);
      await service.stop();
    }
  }

  private async get(spec: ServiceSpec): Promise<ServiceTarget> {
    const existing = this.running.get(this.key(spec));
    if (existing) return existing;
    const service = this.remote ?? (await this.start(spec));
    this.running.set(this.key(spec), service);
    // A freshly started process runs unoptimised (JIT) with cold pools; the bare echo has no SKUs to prime with.
    if (spec.program !== 'echo') await primeService(this.ctx, service);
    return service;
  }

  private async start({ onRedisCluster, lockBackend, ...options }: ServiceSpec): Promise<ServiceTarget> {
    const backing = this.ctx.backing!;
    this.ctx.progress.note(`starting ${options.label}…`);
    const env: Record<string, string> = {
      ...options.env,
      ...(onRedisCluster && (await backing.redisCluster()).redisEnv),
    };
    if (lockBackend) {
      env.LOCK_BACKEND = lockBackend;
      if (lockBackend === 'redlock')
        env.REDIS_LOCK_URLS = (await Promise.all(backing.redlockNodes.map(async (node) => (await node()).url))).join(
          ',',
        );
      if (lockBackend === 'zookeeper') env.ZOOKEEPER_CONNECT = (await backing.zookeeper()).connect;
    }
    const service = await LocalService.start(backing, { ...options, env, nodeArgs: this.nodeArgs });
    this.ctx.started.add(service);
    // Watch a round live: the page lists the run's SKUs (the alternative and the echo have none).
    if (!options.program) this.ctx.progress.note(`${options.label}: dashboard ${dashboardUrl(service)}`);
    return service;
  }
}

/** The service's dashboard, with its token in the fragment (which the browser never sends) when it has one. */
export function dashboardUrl(service: { url: string; adminToken: string | undefined }): string {
  return `${service.url}/dashboard${service.adminToken ? `#token=${encodeURIComponent(service.adminToken)}` : ''}`;
}
