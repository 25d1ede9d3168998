import { ServerStats } from '../infra/server-stats.js';
import type { ServiceTarget } from '../infra/service-process.js';
import type { Profile, RunResults } from '../results.js';
import type { RunContext } from './context.js';
import { runGrowth } from './growth.js';
import { guards, runOversell } from './oversell.js';
import { measureCeiling, measureSales, primeService } from './sales.js';
import { runDashboardCost } from './dashboard.js';
import { runLifecycle } from './lifecycle.js';
import { runSoldOut } from './sold-out.js';
import { pct } from '../report/format.js';

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
] as const;
export type ScenarioName = (typeof scenarioNames)[number];

/**
 * The processes a run measures: the service with the real critical section, combining on (as shipped) and off; with
 * a business step, combining off and on; several instances; the alternative a user would write instead; and the
 * real critical section on a Redis Cluster beside the run's own Redis, combining on and off.
 */
export type ServiceRole =
  | 'real'
  | 'realUncombined'
  | 'businessStep'
  | 'businessStepCombined'
  | 'cluster'
  | 'alternative'
  | 'bareEcho'
  | 'realOnRedisCluster'
  | 'realUncombinedOnRedisCluster';

export interface Targets {
  /** Starts a fresh service for the role; null where the target cannot provide one (a remote --url). */
  start: Record<ServiceRole, (() => Promise<ServiceTarget>) | null>;
  /** The Redis servers a role's service uses (every node), to read their counters; null for a remote target. */
  redisNodes: ((role: ServiceRole) => Promise<string[]>) | null;
  stop(service: ServiceTarget): Promise<void>;
  describe: string;
  /** The run started the Postgres itself, so it may seed it (the growth scenario); never a --url target's. */
  ownsDatabase: boolean;
}

/** Segment count of the segmented cases the targets are judged at (reference article 002: 20 segments). */
export const HEADLINE_SEGMENTS = 20;

/** Attempts per case when the service under test disappears beneath it (e.g. killed from outside). */
const ATTEMPTS_PER_CASE = 3;

/**
 * The running service of each role, started and primed on first use. A case whose service died under it is
 * repeated on a fresh one, and the incident recorded: a result is only ever taken from an uninterrupted case.
 */
class Services {
  private readonly current = new Map<ServiceRole, ServiceTarget>();
  private readonly primed = new WeakSet<ServiceTarget>();

  constructor(
    private readonly ctx: RunContext,
    private readonly targets: Targets,
    private readonly incidents: string[],
  ) {}

  available(role: ServiceRole): boolean {
    return this.targets.start[role] !== null;
  }

  async use<T>(role: ServiceRole, measure: (service: ServiceTarget) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const service = await this.get(role);
      try {
        // The bare echo has no SKUs to prime with; its own warm-up round warms it.
        if (!this.primed.has(service) && role !== 'bareEcho') {
          await primeService(this.ctx, service);
          this.primed.add(service);
        }
        return await measure(service);
      } catch (error) {
        if (service.alive() || attempt >= ATTEMPTS_PER_CASE) throw error;
        const note = `${service.diagnostics().split('\n')[0]} during a case (${(error as Error).message.split('\n')[0]}); started a fresh one and repeated the case`;
        this.incidents.push(note);
        this.ctx.progress.note(note);
        this.current.delete(role);
        await this.targets.stop(service);
      }
    }
  }

  async release(role: ServiceRole): Promise<void> {
    const service = this.current.get(role);
    this.current.delete(role);
    if (service) await this.targets.stop(service);
  }

  private async get(role: ServiceRole): Promise<ServiceTarget> {
    const existing = this.current.get(role);
    if (existing) return existing;
    const start = this.targets.start[role];
    if (!start) throw new Error(`no ${role} service for this target`);
    const service = await start();
    this.current.set(role, service);
    return service;
  }
}

/**
 * Every scenario, in an order that keeps one service busy at a time: the single instance (real critical section),
 * then the instance with the business step, then the cluster; the ceiling is measured first and last to show drift.
 */
export async function runAll(
  ctx: RunContext,
  targets: Targets,
  selected: ReadonlySet<ScenarioName>,
): Promise<Omit<RunResults, 'meta'>> {
  const results: Omit<RunResults, 'meta'> = {
    ceiling: [],
    segments: [],
    cluster: [],
    oversell: [],
    soldOut: [],
    lifecycle: [],
    perOrder: [],
    lockFree: [],
    alternative: [],
    spread: [],
    bareEcho: [],
    dashboard: [],
    memory: [],
    growth: [],
    skipped: [],
    incidents: [],
  };
  const { settings } = ctx;
  const wants = (name: ScenarioName) => selected.has(name);
  const services = new Services(ctx, targets, results.incidents);
  const lockName = (segments: number) => (segments === 1 ? 'single lock' : `${segments} segments`);

  if (wants('ceiling')) {
    results.ceiling.push(
      await services.use('real', (service) =>
        measureCeiling(ctx, { id: 'ceiling-first', label: 'HTTP ceiling (first)', service, instances: 1 }),
      ),
    );
  }

  /** One row of a segment-count comparison, on the service of `role`. */
  const orders = (role: ServiceRole, profile: Profile, combining: boolean, segments: number) => {
    const step = profile === 'business-step' ? `${settings.businessStepMs} ms step` : 'real';
    return services.use(role, (service) =>
      measureSales(ctx, {
        id: `${profile === 'real' ? 'real' : 'step'}-${segments}${combining ? '' : '-uncombined'}`,
        label: `${step} · ${lockName(segments)}${combining ? '' : ' · combining off'}`,
        service,
        path: '/orders',
        profile,
        combining,
        instances: 1,
        segments,
        lockMetrics: true,
      }),
    );
  };
  /** The single lock and the headline segment count, of those the run compares. */
  const endpoints = settings.segmentCounts.filter((n) => n === 1 || n === HEADLINE_SEGMENTS);

  if (wants('segments')) {
    for (const segments of settings.segmentCounts) results.segments.push(await orders('real', 'real', true, segments));
    if (services.available('realUncombined')) {
      for (const segments of endpoints) results.segments.push(await orders('realUncombined', 'real', false, segments));
      await services.release('realUncombined');
    }
  }

  if (wants('per-order')) {
    if (!targets.redisNodes || !services.available('realOnRedisCluster')) {
      results.skipped.push({
        scenario: 'per-order',
        reason: 'it reads the counters of Redis and Postgres servers this run starts, one Redis beside a Redis Cluster',
      });
    } else {
      const topologies = [
        { redis: 'one Redis', combined: 'real', uncombined: 'realUncombined' },
        { redis: 'Redis Cluster', combined: 'realOnRedisCluster', uncombined: 'realUncombinedOnRedisCluster' },
      ] as const;
      for (const topology of topologies) {
        const rows = [
          { role: topology.combined, combining: true, segments: 1 },
          { role: topology.combined, combining: true, segments: HEADLINE_SEGMENTS },
          { role: topology.uncombined, combining: false, segments: HEADLINE_SEGMENTS },
        ];
        for (const { role, combining, segments } of rows) {
          results.perOrder!.push(
            await services.use(role, async (service) => {
              const serverStats = await ServerStats.open(await targets.redisNodes!(role), ctx.db);
              try {
                return await measureSales(ctx, {
                  id: `per-order-${role}-${segments}`,
                  label: `${topology.redis} · ${lockName(segments)}${combining ? '' : ' · combining off'}`,
                  service,
                  path: '/orders',
                  profile: 'real',
                  combining,
                  instances: 1,
                  segments,
                  lockMetrics: true,
                  serverStats,
                  redis: topology.redis,
                });
              } finally {
                await serverStats.close();
              }
            }),
          );
        }
        await services.release(topology.uncombined);
        if (topology.combined !== 'real') await services.release(topology.combined);
      }
    }
  }

  if (wants('bare-echo')) {
    if (!services.available('bareEcho')) {
      results.skipped.push({ scenario: 'bare-echo', reason: 'the bare express echo is a process this run starts' });
    } else {
      results.bareEcho!.push(
        await services.use('bareEcho', (service) =>
          measureCeiling(ctx, {
            id: 'bare-echo',
            label: 'bare express JSON echo (POST /orders → 201)',
            service,
            instances: 1,
            path: '/orders',
            status: 201,
          }),
        ),
      );
      await services.release('bareEcho');
    }
  }

  /** The hot SKU (one SKU, every order), spread traffic and mixed traffic, on the product or the alternative. */
  const shapes = [
    { traffic: undefined, name: 'one hot SKU' },
    { traffic: { skus: settings.spreadSkus, hotShare: 0 }, name: `spread over ${settings.spreadSkus} SKUs` },
    {
      traffic: { skus: settings.spreadSkus, hotShare: settings.mixedHotShare },
      name: `mixed: ${pct(1 - settings.mixedHotShare)} spread over ${settings.spreadSkus} SKUs, ${pct(settings.mixedHotShare)} one hot SKU`,
    },
  ];
  const trafficCase = (role: 'real' | 'alternative', shape: (typeof shapes)[number]) =>
    services.use(role, (service) =>
      measureSales(ctx, {
        id: `${role}-${shape.traffic ? (shape.traffic.hotShare > 0 ? 'mixed' : 'spread') : 'hot'}`,
        label:
          role === 'alternative'
            ? `the alternative · ${shape.name}`
            : `real · ${lockName(HEADLINE_SEGMENTS)} · ${shape.name}`,
        service,
        path: '/orders',
        profile: 'real',
        combining: role === 'real',
        instances: 1,
        segments: role === 'alternative' ? 1 : HEADLINE_SEGMENTS,
        lockMetrics: role === 'real',
        auditInPostgres: role === 'real',
        ...(shape.traffic && { traffic: shape.traffic }),
      }),
    );

  if (wants('alternative') || wants('spread')) {
    if (!services.available('alternative')) {
      results.skipped.push({ scenario: 'alternative', reason: 'the alternative is a process this run starts' });
    } else {
      for (const shape of shapes) {
        if (shape.traffic ? wants('spread') : wants('alternative'))
          results.alternative.push(await trafficCase('alternative', shape));
      }
      await services.release('alternative');
    }
  }

  if (wants('spread')) {
    for (const shape of shapes.filter((x) => x.traffic)) results.spread!.push(await trafficCase('real', shape));
  }

  if (wants('business-step')) {
    if (!services.available('businessStep')) {
      results.skipped.push({
        scenario: 'business-step',
        reason: 'the business step is a setting of a service this run starts; a --url target cannot be given it',
      });
    } else {
      // The sweep without combining shows what segmenting alone buys; then combining on, at the endpoints.
      for (const segments of settings.segmentCounts) {
        results.segments.push(await orders('businessStep', 'business-step', false, segments));
      }
      await services.release('businessStep');
      for (const segments of endpoints) {
        results.segments.push(await orders('businessStepCombined', 'business-step', true, segments));
      }
      await services.release('businessStepCombined');
    }
  }

  if (wants('sold-out'))
    results.soldOut.push(await services.use('real', (service) => runSoldOut(ctx, service, HEADLINE_SEGMENTS)));

  if (wants('lifecycle'))
    results.lifecycle!.push(await services.use('real', (service) => runLifecycle(ctx, service, HEADLINE_SEGMENTS)));

  if (wants('dashboard'))
    results.dashboard!.push(
      await services.use('real', (service) =>
        runDashboardCost(ctx, service, HEADLINE_SEGMENTS, settings.dashboardWatchers),
      ),
    );

  if (wants('lock-free')) {
    const lockFree = [
      {
        id: 'pg-row',
        label: 'lock-free · Postgres conditional UPDATE, 1 row',
        path: '/bench/lock-free/pg-conditional',
        segments: 1,
      },
      {
        id: 'pg-rows',
        label: `lock-free · Postgres conditional UPDATE, ${HEADLINE_SEGMENTS} rows`,
        path: '/bench/lock-free/pg-conditional',
        segments: HEADLINE_SEGMENTS,
      },
      {
        id: 'redis-counter',
        label: 'lock-free · Redis Lua counter + Postgres ledger',
        path: '/bench/lock-free/redis-counter',
        segments: 1,
      },
    ] as const;
    for (const baseline of lockFree) {
      results.lockFree.push(
        await services.use('real', (service) =>
          measureSales(ctx, {
            ...baseline,
            service,
            profile: 'real',
            combining: false,
            instances: 1,
            lockMetrics: false,
            stockIn: baseline.id === 'redis-counter' ? 'redis-counter' : 'segments',
          }),
        ),
      );
    }
  }

  if (wants('memory')) {
    results.memory.push(
      await services.use('real', (service) =>
        measureSales(ctx, {
          id: `memory-${settings.memoryConnections}`,
          label: `real · ${HEADLINE_SEGMENTS} segments · ${settings.memoryConnections} connections`,
          service,
          path: '/orders',
          profile: 'real',
          combining: true,
          instances: 1,
          segments: HEADLINE_SEGMENTS,
          connections: settings.memoryConnections,
          lockMetrics: true,
        }),
      ),
    );
  }

  if (wants('growth')) {
    const db = ctx.db;
    if (!db || !targets.ownsDatabase) {
      results.skipped.push({
        scenario: 'growth',
        reason: 'seeding a long ledger needs the Postgres of a service this run starts',
      });
    } else {
      results.growth.push(
        ...(await services.use('real', (service) =>
          runGrowth(ctx, db, service, { segments: HEADLINE_SEGMENTS, ledgerRows: settings.growthLedgerRows }),
        )),
      );
    }
  }

  if (wants('oversell'))
    results.oversell.push(await services.use('real', (service) => runOversell(ctx, service, 1, guards.localMutex)));

  if (wants('cluster') || wants('oversell')) {
    if (!services.available('cluster')) {
      results.skipped.push({
        scenario: 'cluster',
        reason: 'several instances behind one port are started by this run; a --url target is measured as it is',
      });
    } else {
      const instances = settings.clusterInstances;
      if (wants('cluster')) {
        results.ceiling.push(
          await services.use('cluster', (service) =>
            measureCeiling(ctx, {
              id: 'ceiling-cluster',
              label: `HTTP ceiling · ${instances} instances`,
              service,
              instances,
            }),
          ),
        );
        for (const segments of settings.clusterSegmentCounts) {
          results.cluster.push(
            await services.use('cluster', (service) =>
              measureSales(ctx, {
                id: `cluster-${segments}`,
                label: `${instances} instances · ${lockName(segments)}`,
                service,
                path: '/orders',
                profile: 'real',
                combining: true,
                instances,
                segments,
                lockMetrics: true,
              }),
            ),
          );
        }
      }
      if (wants('oversell')) {
        for (const guard of [guards.none, guards.localMutex, guards.redisLock, guards.product]) {
          results.oversell.push(
            await services.use('cluster', (service) => runOversell(ctx, service, instances, guard)),
          );
        }
      }
      await services.release('cluster');
    }
  }

  if (wants('ceiling')) {
    results.ceiling.push(
      await services.use('real', (service) =>
        measureCeiling(ctx, { id: 'ceiling-last', label: 'HTTP ceiling (last)', service, instances: 1 }),
      ),
    );
  }
  await services.release('real');
  return results;
}
