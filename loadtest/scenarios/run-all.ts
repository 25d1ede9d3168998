import type { ServiceTarget } from '../infra/service-process.js';
import type { RunResults } from '../results.js';
import type { RunContext } from './context.js';
import { guards, runOversell } from './oversell.js';
import { measureCeiling, measureSales, primeService } from './sales.js';
import { runSoldOut } from './sold-out.js';

export const scenarioNames = [
  'ceiling',
  'segments',
  'business-step',
  'cluster',
  'oversell',
  'sold-out',
  'lock-free',
  'memory',
] as const;
export type ScenarioName = (typeof scenarioNames)[number];

/** The services a run measures: the real critical section, the same with a business step, several instances. */
export type ServiceRole = 'real' | 'businessStep' | 'cluster';

export interface Targets {
  /** Starts a fresh service for the role; null where the target cannot provide one (a remote --url). */
  start: Record<ServiceRole, (() => Promise<ServiceTarget>) | null>;
  stop(service: ServiceTarget): Promise<void>;
  describe: string;
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
        if (!this.primed.has(service)) {
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
    lockFree: [],
    memory: [],
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

  if (wants('segments')) {
    for (const segments of settings.segmentCounts) {
      results.segments.push(
        await services.use('real', (service) =>
          measureSales(ctx, {
            id: `real-${segments}`,
            label: `real · ${lockName(segments)}`,
            service,
            path: '/orders',
            profile: 'real',
            instances: 1,
            segments,
            lockMetrics: true,
          }),
        ),
      );
    }
  }

  if (wants('business-step')) {
    if (!services.available('businessStep')) {
      results.skipped.push({
        scenario: 'business-step',
        reason: 'the business step is a setting of a service this run starts; a --url target cannot be given it',
      });
    } else {
      for (const segments of settings.segmentCounts) {
        results.segments.push(
          await services.use('businessStep', (service) =>
            measureSales(ctx, {
              id: `step-${segments}`,
              label: `${settings.businessStepMs} ms step · ${lockName(segments)}`,
              service,
              path: '/orders',
              profile: 'business-step',
              instances: 1,
              segments,
              lockMetrics: true,
            }),
          ),
        );
      }
      await services.release('businessStep');
    }
  }

  if (wants('sold-out'))
    results.soldOut.push(await services.use('real', (service) => runSoldOut(ctx, service, HEADLINE_SEGMENTS)));

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
          instances: 1,
          segments: HEADLINE_SEGMENTS,
          connections: settings.memoryConnections,
          lockMetrics: true,
        }),
      ),
    );
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
