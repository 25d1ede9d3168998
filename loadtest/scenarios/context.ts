import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LockBackendKind } from '../../src/lock/distributed-lock.js';
import { waitFor } from '../../test/support/wait-for.js';
import { MetricsSnapshot } from '../../test/support/scrape-metric.js';
import { StockApi } from '../client/stock-api.js';
import type { BackingServices } from '../infra/backing-services.js';
import { type CpuUsage, meterCpu, procAvailable } from '../infra/process-usage.js';
import type { ServiceTarget } from '../infra/service-process.js';
import { mergeSlices, type RoundResult, type RoundSpec, runRound, type RunProgress } from '../runner/round.js';

const full = {
  connections: 64,
  segmentCounts: [1, 2, 4, 8, 16, 20, 32],
  warmupSeconds: 3,
  measureSeconds: 10,
  businessStepMs: 20,
  clusterInstances: 2,
  clusterSegmentCounts: [1, 20],
  /** The fleet: instances behind one port × segments × Redis's and Postgres's one-way delay (0: no proxy). */
  fleetInstances: [1, 2, 4],
  fleetSegmentCounts: [1, 4, 20],
  fleetDelaysMs: [0, 1],
  memoryConnections: 256,
  quantity: 1,
  timeoutSeconds: 10,
  maxRequestsPerRound: 200_000,
  spreadSkus: 400,
  mixedHotShare: 0.2,
  /** Rounds of each comparison of the product with a yardstick, sides alternating. */
  comparisonRounds: 3,
  dashboardWatchers: 20,
  /** Reservations of the expiry case, all reaching expiresAt in the same second. */
  expiringReservations: 10_000,
  /** Stock of each oversell-demonstration SKU; three times as many one-unit orders are sent. */
  oversellStock: 500,
  /** Ledger sizes of the growth scenario (0 = empty), and each of its rounds (SKU view, then orders). */
  growthLedgerRows: [0, 5_000_000],
  growthConnections: 4,
  growthRequests: 4_000,
  /** The lock benchmark: workers on K keys holding H ms, each cell a warm-up and a measured window. */
  lockWorkers: 50,
  lockKeys: [1, 20],
  lockHoldsMs: [0, 20],
  lockWarmupSeconds: 1,
  lockMeasureSeconds: 6,
  lockContenders: ['this-lock', 'this-lock-fair', 'redlock', 'redis-semaphore'],
  lockBackends: ['redis', 'redlock', 'postgres', 'zookeeper'] as LockBackendKind[],
  /** The order flow on each backend: its LOCK_WAIT_MS. */
  lockWaitMs: 10_000,
  retentionMinutes: 10,
  retentionSeconds: 60,
  retentionSampleSeconds: 30,
  /** Customers joining the drop's line: a hundred for each of its 1,000 units. */
  dropCustomers: 100_000,
};
export type RunSettings = typeof full;

export const presets: Record<'full' | 'quick', RunSettings> = {
  full,
  quick: {
    ...full,
    segmentCounts: [1, 20],
    warmupSeconds: 1,
    measureSeconds: 1.5,
    clusterSegmentCounts: [20],
    comparisonRounds: 1,
    maxRequestsPerRound: 40_000,
    oversellStock: 100,
    growthLedgerRows: [0, 100_000],
    growthRequests: 1_000,
    lockWarmupSeconds: 0.5,
    lockMeasureSeconds: 1,
    retentionMinutes: 1,
    retentionSeconds: 20,
    retentionSampleSeconds: 10,
    dropCustomers: 10_000,
  },
};

/** A round as a scenario asks for it: the rest comes from the run's settings and the service. */
type Titled = Partial<RoundSpec> & { title: string };
type Side = {
  service: ServiceTarget;
  spec: Titled;
  status?: number;
  warmup?: RoundResult;
  meter?: () => Promise<(turn: RoundResult) => Promise<void>>;
};

export class RunContext {
  private readonly runTag = `lt${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  private counter = 0;
  /** Services this run started and has not stopped yet: stopped when the run ends early. */
  readonly started = new Set<ServiceTarget>();

  constructor(
    readonly settings: RunSettings,
    readonly progress: RunProgress,
    readonly backing: BackingServices,
  ) {}

  api = (service: ServiceTarget) => new StockApi(service);
  /** The service's metrics (the cluster primary's, aggregated over its workers, for several instances). */
  scrape = (service: ServiceTarget) => MetricsSnapshot.scrape(service.metricsUrl, service.adminToken);

  /** A fresh SKU, a name no earlier run or scenario used (`more`: more of its fields, e.g. a sale window). */
  async createSku(service: ServiceTarget, label: string, stock: number, segments: number, more = {}) {
    const sku = `${this.runTag}-${label}-${++this.counter}`.slice(0, 64);
    await this.api(service).createSku(sku, stock, segments, more);
    return sku;
  }

  round(service: ServiceTarget, spec: Titled, status = 201) {
    const { connections, timeoutSeconds, quantity } = this.settings;
    const headers = this.api(service).adminHeaders;
    const base = { baseUrl: service.url, path: '/orders', body: { quantity }, headers, connections, timeoutSeconds };
    return runRound({ ...base, ...spec }, status, this.progress);
  }

  // Sides measured in turns (A B, B A…) of at least 1.5 s (a shorter one measures mostly its start), so a machine
  // whose speed drifts or stalls weighs on each alike; each warmed up unless it was, sized by its warm-up rate.
  // `meter`, when a side has one, is started before each of its turns and given the turn's result after it.
  async measureInTurns(sides: Side[]) {
    const turns = sides.length > 1 ? Math.max(1, Math.min(6, Math.floor(this.settings.measureSeconds / 1.5))) : 1;
    const measured = [];
    for (const { service, spec, status = 201, meter, ...side } of sides) {
      const warmup = side.warmup ?? (await this.warmUp(service, spec, status));
      const connections = spec.connections ?? this.settings.connections;
      const share = Math.max(2 * connections, Math.round(this.measuredAmount(warmup, connections, status) / turns));
      // A reservation round sends two requests per order: a reservation and its confirmation.
      const amount = share * (spec.confirmEach ? 2 : 1);
      // Merging turns needs every answer's latency; one turn is reported as it is.
      const latencies = turns > 1 ? ([] as number[]) : undefined;
      const [slices, cpu]: [RoundResult[], CpuUsage[]] = [[], []];
      measured.push({ service, spec, status, warmup, amount, latencies, slices, cpu, meter });
    }
    for (let turn = 0; turn < turns; turn++) {
      const order = turn % 2 ? [...measured].reverse() : measured;
      for (const { service, spec, status, amount, latencies, slices, cpu, meter } of order) {
        const title = turns > 1 ? `${spec.title} · turn ${turn + 1} of ${turns}` : spec.title;
        const endMeter = await meter?.();
        const endCpu = procAvailable ? meterCpu(service.allPids, this.backing.postmasterPid) : null;
        const slice = await this.round(service, { ...spec, title, amount, latencies }, status);
        slices.push(slice);
        if (endCpu) cpu.push(endCpu());
        await endMeter?.(slice);
      }
    }
    return measured.map(({ spec, status, warmup, latencies, slices, cpu }) => {
      const round = latencies ? mergeSlices(spec.title, slices, latencies) : slices[0]!;
      const perSecond = round.ratePerSecond[status] ?? 0;
      return { label: spec.title, warmup, measured: round, perSecond, cpu: cpu.length ? sumCpu(cpu) : null };
    });
  }

  /** Runs the timed warm-up round, and lets the service finish what it left in flight. */
  async warmUp(service: ServiceTarget, spec: Titled, status = 201) {
    const title = `${spec.title} · warm-up`;
    const warmup = await this.round(service, { ...spec, title, durationSeconds: this.settings.warmupSeconds }, status);
    await this.settle(service);
    return warmup;
  }

  /** Requests for the measured round: what the warm-up rate fills the measuring time with. */
  measuredAmount(warmup: RoundResult, connections: number, status = 201): number {
    const wanted = Math.round((warmup.ratePerSecond[status] ?? 0) * this.settings.measureSeconds);
    return Math.max(connections * 2, Math.min(wanted, this.settings.maxRequestsPerRound));
  }

  /** Waits until nothing is in flight: what a timed round left parked must not reach the next round or its books. */
  async settle(service: ServiceTarget): Promise<void> {
    await sleep(100);
    const inFlight = (m: MetricsSnapshot) => m.sum('stock_orders_in_progress') + m.sum('bench_sales_in_progress');
    await waitFor(async () => inFlight(await this.scrape(service)) === 0, this.settings.timeoutSeconds * 1000);
  }
}

/** CPU use over several metered stretches as one: each figure weighted by its stretch's length. */
function sumCpu(parts: CpuUsage[]): CpuUsage {
  const seconds = parts.reduce((sum, part) => sum + part.seconds, 0);
  const cores = (group: keyof CpuUsage['cores']) =>
    parts.reduce((sum, p) => sum + p.cores[group] * p.seconds, 0) / seconds;
  return { seconds, cores: { service: cores('service'), postgres: cores('postgres'), client: cores('client') } };
}
