// A run's cases as one table, run in order so one service is busy at a time.
import { randomBytes } from 'node:crypto';
import { SignJWT } from 'jose';
import type { LockBackendKind } from '../../src/lock/distributed-lock.js';
import { AUDIENCE, bearer, ISSUER, serviceKey, writeKeysFile } from '../../test/security/credentials.js';
import { zookeeperMissing } from '../../test/support/servers/index.js';
import { openServerStats } from '../infra/server-stats.js';
import { type LocalServiceOptions, type ServiceTarget, startService } from '../infra/service-process.js';
import * as cases from './cases.js';
import type { RunContext, RunSettings } from './context.js';
import { runDrop } from './drop.js';
import { runExpiry } from './expiry.js';
import { delayedBacking, FLEET_ENV, fleetLabel, measureFleet } from './fleet.js';
import { type LockCell, runCell } from './locks.js';
import { compareSales, measureSales, measureWithWebhook, WARMUP_STOCK } from './sales.js';
import type { Profile, SalesCase, SalesSpec } from './sales.js';

export const scenarioNames = [
  ...['ceiling', 'segments', 'alternative', 'spread', 'bare-echo', 'business-step', 'cluster', 'oversell'],
  ...['sold-out', 'sale-window', 'lifecycle', 'expiry', 'dashboard', 'per-order', 'lock-free', 'memory', 'growth'],
  ...['auth', 'events', 'locks', 'lock-backends', 'lock-order-flow', 'event-retention', 'drop', 'fleet'],
] as const;
export type ScenarioName = (typeof scenarioNames)[number];
/** Run only when named: they start servers beyond the run's own (Redlock's nodes, ZooKeeper), or take ten minutes. */
export const namedOnly: ScenarioName[] = ['lock-backends', 'lock-order-flow', 'event-retention', 'fleet'];
export const HEADLINE_SEGMENTS = 20; // The segment count the targets are judged at (reference article 002).

type Result<F extends (...args: never[]) => unknown> = Awaited<ReturnType<F>>;
/** Cases sold through a service, books checked each round; `spread`: the product's side against the alternative. */
const salesLists = [
  ...['segments', 'cluster', 'perOrder', 'lockFree', 'alternative', 'spread', 'memory'],
  ...['auth', 'events', 'lockOrderFlow', 'fleet'],
] as const;
type SalesList = (typeof salesLists)[number];
export const emptyCases = () => ({
  ...(Object.fromEntries(salesLists.map((k) => [k, [] as SalesCase[]])) as Record<SalesList, SalesCase[]>),
  ceiling: [] as Result<typeof cases.measureCeiling>[],
  oversell: [] as Result<typeof cases.runOversell>[],
  soldOut: [] as Result<typeof cases.runRefusals>[],
  lifecycle: [] as Result<typeof cases.runLifecycle>[],
  expiry: [] as Result<typeof runExpiry>[],
  bareEcho: [] as Result<typeof cases.measureCeiling>[],
  dashboard: [] as Result<typeof cases.runDashboardCost>[],
  growth: [] as Result<typeof cases.runGrowth>,
  eventRetention: [] as Result<typeof cases.runEventRetention>[],
  drop: [] as Result<typeof runDrop>[],
  locks: [] as LockCell[],
  skipped: [] as { scenario: string; reason: string }[],
});
export type RunCases = ReturnType<typeof emptyCases>;
export const casesWithBooks = (run: RunCases) => salesLists.flatMap((k) => run[k]);

/** A service some rows share (the same object): on the run's Redis unless it asks for a Redis Cluster. */
type ServiceSpec = LocalServiceOptions & {
  onRedisCluster?: boolean;
  lockBackend?: LockBackendKind;
  /** Redis and Postgres reached through proxies that delay each way by this many ms (the fleet). */
  delayMs?: number;
};
type Unless = () => string | undefined; // Why this run cannot measure a row, beyond its services.
/** Cases measured together on their services (none: the lock benchmark), filing their results in the run's lists. */
type Row = [ScenarioName, ServiceSpec[], (c: RunContext, ...on: ServiceTarget[]) => Promise<unknown>, Unless?];
/** A case on one service (none: the lock benchmark) filing its result in T[]. */
type OneCase<T> = [ScenarioName, T[], ServiceSpec | undefined, (c: RunContext, s: ServiceTarget) => Promise<T>];

const REAL: ServiceSpec = { label: 'service (real critical section)' }; // The service as shipped.
const COMBINING_OFF = { COMBINE_MAX_BATCH: '1' };
const combines = (service: ServiceSpec) => service.env?.COMBINE_MAX_BATCH !== '1';
export const lockName = (segments: number) => (segments === 1 ? 'single lock' : `${segments} segments`);
const pct = (share: number) => `${Math.round(share * 100)} %`;
/** The lock benchmark's stores are started beside the run's own servers (ZooKeeper only where it is installed). */
const ownServers = (store: string) => () => (store.endsWith('zookeeper') ? zookeeperMissing() : undefined);

/** The rows of a run with these settings, filing their results in `r`. */
function plan(s: RunSettings, r: RunCases): Row[] {
  const n = HEADLINE_SEGMENTS;
  const rows: Row[] = [];
  const add = <T>(...[scenario, into, on, measure, unless]: [...OneCase<T>, Unless?]) =>
    rows.push([scenario, on ? [on] : [], async (c, target) => into.push(await measure(c, target!)), unless]);
  type Spec = Omit<SalesSpec, 'service'>;
  const sales = (scenario: ScenarioName, into: SalesCase[], on: ServiceSpec, spec: Spec, unless?: Unless) =>
    add(scenario, into, on, (c, service) => measureSales(c, { ...spec, service }), unless);
  const off = (combining: boolean) => (combining ? '' : ' · combining off');
  /** A segment-count comparison: the real section or the business step, combining on or off. */
  const sweep = (profile: Profile, service: ServiceSpec, counts: number[]) => {
    const [step, combining] = [profile === 'business-step', combines(service)];
    for (const segments of counts) {
      const id = `${step ? 'step' : 'real'}-${segments}${combining ? '' : '-uncombined'}`;
      const label = `${step ? `${s.businessStepMs} ms step` : 'real'} · ${lockName(segments)}${off(combining)}`;
      sales(step ? 'business-step' : 'segments', r.segments, service, { id, label, profile, combining, segments });
    }
  };
  const ceiling = (id: string, label: string, on: ServiceSpec = REAL) =>
    add(on.instances ? 'cluster' : 'ceiling', r.ceiling, on, (c, service) =>
      cases.measureCeiling(c, { id, label, service, instances: on.instances }),
    );
  /** The headline SKU's case of a comparison of settings, or of traffic. */
  const hot = (name: string) => ({ label: `real · ${lockName(n)} · ${name}`, segments: n });
  /** The comparisons' rounds and their labels' suffix; in turn, each side goes first in every other round. */
  const rounds = Array.from({ length: s.comparisonRounds }, (_, i) => i + 1);
  const of = (round: number) => (s.comparisonRounds > 1 ? ` · round ${round}` : '');
  const inTurn = <T>(round: number, sides: readonly T[]) => (round % 2 ? sides : [...sides].reverse());
  const endpoints = s.segmentCounts.filter((k) => k === 1 || k === n);

  ceiling('ceiling', 'HTTP ceiling');
  const uncombined: ServiceSpec = { label: 'service, combining off', env: COMBINING_OFF };
  sweep('real', REAL, s.segmentCounts);
  sweep('real', uncombined, endpoints);

  // What an order costs each server: the shipped service and combining off, on one Redis and on a Redis Cluster.
  const onCluster: ServiceSpec = { label: 'service on a Redis Cluster', onRedisCluster: true };
  const offOnCluster = { ...uncombined, ...onCluster, label: 'service on a Redis Cluster, combining off' };
  for (const service of [REAL, uncombined, onCluster, offOnCluster]) {
    const [combining, redis] = [combines(service), service.onRedisCluster ? 'Redis Cluster' : 'one Redis'];
    for (const segments of combining ? [1, n] : [n]) {
      const label = `${redis} · ${lockName(segments)}${off(combining)}`;
      const id = `per-order-${service.onRedisCluster ? 'redis-cluster-' : ''}${combining ? '' : 'uncombined-'}${segments}`;
      add('per-order', r.perOrder, service, async (c, target) => {
        const nodes = service.onRedisCluster ? (await c.backing.redisCluster()).redisNodes : c.backing.redisNodes;
        const serverStats = await openServerStats(nodes, c.backing.db);
        const spec = { id, label, service: target, combining, segments, serverStats, tags: { redis } };
        return measureSales(c, spec).finally(() => serverStats.close());
      });
    }
  }

  const echo = { label: 'a bare express JSON echo', program: 'echo' } as const;
  const alternative = { label: 'the alternative (express + pg, conditional UPDATE)', program: 'alternative' } as const;
  const { spreadSkus: spread, mixedHotShare: hotShare } = s;
  const mixed = `mixed: ${pct(1 - hotShare)} spread over ${spread} SKUs, ${pct(hotShare)} one hot SKU`;
  const shapes = [
    ['hot', 'one hot SKU', undefined],
    ['spread', `spread over ${spread} SKUs`, { skus: spread, hotShare: 0 }],
    ['mixed', mixed, { skus: spread, hotShare }],
  ] as const;
  // In rounds, sides in turns: the report judges each comparison's median round; the bare echo runs once a round.
  for (const round of rounds) {
    const bareEcho = { id: 'bare-echo', label: `bare express JSON echo (POST /orders → 201)${of(round)}`, round };
    add('bare-echo', r.bareEcho, echo, (c, service) =>
      cases.measureCeiling(c, { ...bareEcho, path: '/orders', service, status: 201 }),
    );
    for (const [id, name, traffic] of shapes) {
      const [tags, label] = [{ round }, `${name}${of(round)}`];
      const theirs = { id: `alternative-${id}`, label: `the alternative · ${label}`, segments: 1, alternative: true };
      const ours = { id: `real-${id}`, ...hot(label) };
      const sides = inTurn(round, [[r.alternative, alternative, theirs] as const, [r.spread, REAL, ours] as const]);
      const specs = (on: ServiceTarget[]) =>
        sides.map(([, , spec], i) => ({ ...spec, traffic, tags, service: on[i]! }));
      const compare = async (c: RunContext, ...on: ServiceTarget[]) =>
        (await compareSales(c, specs(on))).forEach((result, i) => sides[i]![0].push(result));
      rows.push([traffic ? 'spread' : 'alternative', sides.map(([, on]) => on), compare]);
    }
    // Refusals against the product's own echo, measured in turns with each of them.
    add('sold-out', r.soldOut, REAL, (c, service) => cases.runRefusals(c, service, n, 'sold-out', of(round)));
    add('sale-window', r.soldOut, REAL, (c, service) => cases.runRefusals(c, service, n, 'not-on-sale', of(round)));
  }

  // The sweep without combining shows what segmenting alone buys; then combining on, at the endpoints.
  const step = { CRITICAL_SECTION_DELAY_MS: String(s.businessStepMs) };
  const stepOff = { label: `${s.businessStepMs} ms business step, combining off`, env: { ...step, ...COMBINING_OFF } };
  sweep('business-step', stepOff, s.segmentCounts);
  sweep('business-step', { label: `${s.businessStepMs} ms business step`, env: step }, endpoints);

  add('lifecycle', r.lifecycle, REAL, (c, service) => cases.runLifecycle(c, service, n));
  add('expiry', r.expiry, REAL, (c, service) => runExpiry(c, service, s.expiringReservations, n));
  add('dashboard', r.dashboard, REAL, (c, service) => cases.runDashboardCost(c, service, n, s.dashboardWatchers));
  for (const [id, label, route, segments] of [
    ['pg-row', 'Postgres conditional UPDATE, 1 row', 'pg-conditional', 1],
    ['pg-rows', `Postgres conditional UPDATE, ${n} rows`, 'pg-conditional', n],
    ['redis-counter', 'Redis Lua counter + Postgres ledger', 'redis-counter', 1],
  ] as const) {
    const where = { path: `/bench/lock-free/${route}`, stockIn: route === 'redis-counter' ? route : undefined };
    sales('lock-free', r.lockFree, REAL, { id, label: `lock-free · ${label}`, segments, combining: false, ...where });
  }
  // On a service of its own: what the connections cost, not what the shipped service's earlier cases left behind.
  const wide = s.memoryConnections;
  const memory = { id: `memory-${wide}`, ...hot(`${wide} connections`), connections: wide };
  sales('memory', r.memory, { label: 'service for the memory case' }, memory);

  const instances = s.clusterInstances;
  const cluster = { label: `${instances} instances behind one port`, instances };
  add('oversell', r.oversell, REAL, (c, service) => cases.runOversell(c, service, 1, cases.guards.localMutex));
  ceiling('ceiling-cluster', `HTTP ceiling · ${instances} instances`, cluster);
  for (const segments of s.clusterSegmentCounts) {
    const label = `${instances} instances · ${lockName(segments)}`;
    sales('cluster', r.cluster, cluster, { id: `cluster-${segments}`, label, instances, segments });
  }
  for (const guard of Object.values(cases.guards))
    add('oversell', r.oversell, cluster, (c, service) => cases.runOversell(c, service, instances, guard));
  rows.push(['drop', [echo, cluster], async (c, bare, on) => r.drop.push(await runDrop(c, bare!, on!, n))]);
  // After the drop: the growth case seeds millions of ledger rows into the same Postgres, which stays busy a while.
  rows.push(['growth', [REAL], async (c, service) => r.growth.push(...(await cases.runGrowth(c, service!, n)))]);

  // What authentication and events cost an order: the same hot-SKU load on services that differ in one setting.
  const key = serviceKey('loadtest', ['orders:place']);
  const [ADMIN_TOKEN, secret] = [randomBytes(24).toString('hex'), randomBytes(32).toString('hex')];
  const claims = { sub: 'loadtest-customer', iss: ISSUER, aud: AUDIENCE };
  const signed = new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime('12h');
  const issuer = { CUSTOMER_JWT_SECRET: secret, CUSTOMER_JWT_ISSUER: ISSUER, CUSTOMER_JWT_AUDIENCE: AUDIENCE };
  const keyService = { label: 'service with API_KEYS_FILE', env: { ADMIN_TOKEN, API_KEYS_FILE: writeKeysFile([key]) } };
  const tokenService = { label: 'service with a customer issuer', env: { ADMIN_TOKEN, ...issuer } };
  for (const [id, name, service, headers] of [
    ['none', 'no credential (open mode)', REAL, async () => ({})],
    ['key', 'service key', keyService, async () => bearer(key.key)],
    ['token', 'customer token (HS256 JWT)', tokenService, async () => bearer(await signed.sign(Buffer.from(secret)))],
  ] as const)
    sales('auth', r.auth, service, { id: `auth-${id}`, ...hot(name), tags: { auth: id }, headers });
  // Events off, on, on with a webhook receiving them, and the books audit off (what it costs); in rounds, in turns.
  const withEnv = (name: string, value: string) => ({ label: `service with ${name}=${value}`, env: { [name]: value } });
  const settings = [
    ['off', 'events off', withEnv('EVENTS', 'off'), measureSales],
    ['on', 'events on', REAL, measureSales],
    ['webhook', 'events on, a webhook receiving them', REAL, measureWithWebhook],
    ['audit-off', 'events on, books audit off', withEnv('AUDIT_INTERVAL_MS', '0'), measureSales],
  ] as const;
  for (const round of rounds)
    for (const [id, name, service, measure] of inTurn(round, settings)) {
      const spec = { id: `events-${id}`, ...hot(`${name}${of(round)}`), tags: { events: id, round } };
      add('events', r.events, service, (c, target) => measure(c, { ...spec, service: target }));
    }

  // The lock alone: K keys × H ms × each contender, on the lock benchmark's own servers.
  const contenders = [...s.lockContenders, ...s.lockBackends.map((kind) => `backend:${kind}`)];
  for (const keys of s.lockKeys)
    for (const holdMs of s.lockHoldsMs)
      for (const name of contenders) {
        const scenario = name.startsWith('backend:') ? 'lock-backends' : 'locks';
        add(scenario, r.locks, undefined, (c) => runCell(c, name, keys, holdMs), ownServers(name));
      }
  // The service's order flow on each backend, a business step held in the lock.
  for (const holdMs of s.lockHoldsMs)
    for (const lockBackend of s.lockBackends) {
      const env = { CRITICAL_SECTION_DELAY_MS: String(holdMs), LOCK_WAIT_MS: String(s.lockWaitMs), PG_POOL_SIZE: '40' };
      const service = { label: `service on the ${lockBackend} lock backend, ${holdMs} ms step`, env, lockBackend };
      const [label, tags] = [`order flow · ${lockBackend} · ${holdMs} ms step`, { lockBackend, holdMs }];
      const flow = { id: `order-flow-${lockBackend}-${holdMs}`, label, segments: n, connections: s.lockWorkers, tags };
      sales('lock-order-flow', r.lockOrderFlow, service, flow, ownServers(lockBackend));
    }
  // The fleet, one row per instance count: every segment count on every delay, in alternating turns.
  for (const instances of s.fleetInstances) {
    const services = s.fleetDelaysMs.map((delayMs) => ({
      label: fleetLabel(instances, delayMs),
      instances,
      delayMs,
      env: FLEET_ENV,
    }));
    rows.push([
      'fleet',
      services,
      async (c, ...on) =>
        r.fleet.push(...(await measureFleet(c, on, instances, s.fleetDelaysMs, s.fleetSegmentCounts))),
    ]);
  }
  // Last: ten minutes of orders through the outbox and retention's deletes leave Postgres busy vacuuming a while.
  const env = { EVENTS_RETENTION_SECONDS: String(s.retentionSeconds) };
  const keeping = { label: `service keeping events ${s.retentionSeconds} s`, env };
  add('event-retention', r.eventRetention, keeping, (c, target) => cases.runEventRetention(c, target, n));
  return rows;
}

/** Runs the selected rows, a row this run cannot have skipped; a case whose service died fails the run. */
export async function runPlan(ctx: RunContext, selected: ReadonlySet<ScenarioName>) {
  const results = emptyCases();
  const rows = plan(ctx.settings, results).filter(([scenario, , , unless]) => {
    const reason = selected.has(scenario) && unless?.();
    if (reason && !results.skipped.some((x) => x.scenario === scenario && x.reason === reason))
      results.skipped.push({ scenario, reason });
    return selected.has(scenario) && !reason;
  });
  // Each service starts on first use and stops after its last row.
  const running = new Map<ServiceSpec, ServiceTarget>();
  const lastRow = new Map(rows.flatMap(([, specs], i) => specs.map((spec) => [spec, i])));
  for (const [i, [scenario, specs, measure]] of rows.entries()) {
    for (const spec of specs) if (!running.has(spec)) running.set(spec, await startPrimed(ctx, spec));
    const services = specs.map((spec) => running.get(spec)!);
    await measure(ctx, ...services).catch((error: unknown) => {
      // A service that died mid-case (a crash, out of memory): the run is worth rerunning, not its figures (cli.ts
      // prints every started service's last output).
      const ended = services.find((service) => !service.alive())?.diagnostics();
      if (!ended) throw error;
      throw new Error(`${scenario}: ${ended.split('\n')[0]} during the case; the run stops here`, { cause: error });
    });
    for (const [j, spec] of specs.entries())
      if (lastRow.get(spec) === i && ctx.started.delete(services[j]!)) await services[j]!.stop();
  }
  return results;
}

async function startPrimed(ctx: RunContext, { onRedisCluster, lockBackend, delayMs, ...options }: ServiceSpec) {
  const { backing, progress } = ctx;
  progress.note(`starting ${options.label}…`);
  const cluster = onRedisCluster ? (await backing.redisCluster()).redisEnv : {};
  const delayed = delayMs ? await delayedBacking(backing, delayMs) : undefined;
  const env: Record<string, string> = { ...options.env, ...cluster, ...delayed?.env };
  if (lockBackend) env.LOCK_BACKEND = lockBackend;
  if (lockBackend === 'redlock') env.REDIS_LOCK_URLS = (await backing.redlockUrls()).join();
  if (lockBackend === 'zookeeper') env.ZOOKEEPER_CONNECT = (await backing.zookeeper()).connect;
  const started = await startService(backing, { ...options, env }).catch(async (error: unknown) => {
    await delayed?.stop();
    throw error;
  });
  // The proxies stop with the service they serve.
  const service = delayed ? { ...started, stop: () => started.stop().finally(delayed.stop) } : started;
  ctx.started.add(service);
  // Watch a round live (the alternative and the echo have no page); the token goes in the fragment, never sent.
  const token = service.adminToken ? `#token=${encodeURIComponent(service.adminToken)}` : '';
  if (!options.program) progress.note(`${options.label}: dashboard ${service.url}/dashboard${token}`);
  // A fresh process runs its first seconds unoptimised and with cold pools: a throwaway round pays for that.
  if (options.program !== 'echo') {
    const body = { sku: await ctx.createSku(service, 'prime', WARMUP_STOCK, 4), quantity: ctx.settings.quantity };
    await ctx.warmUp(service, { title: `priming ${service.label}`, body });
  }
  return service;
}
