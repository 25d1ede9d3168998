import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { RunResults } from '../run-results.js';
import type { CpuUsage } from '../infra/process-usage.js';
import type { RoundResult } from '../runner/round.js';
import { HEADLINE_SEGMENTS } from '../scenarios/plan.js';
import type { Profile, SalesCase } from '../scenarios/sales.js';
import { renderCharts } from './charts.js';
import { type Column, expectedSafe, int, isOurs, mib, ms, num, pct, type RunFigures, runFigures } from './figures.js';
import { serviceMsPerAnswer, table, times } from './figures.js';
import { targetsTable } from './targets.js';

const TEMPLATE = new URL('../../../loadtest/report/benchmarks.template.md', import.meta.url);
const ANALYSIS = /<!-- analysis:begin -->\n?([\s\S]*?)\n?<!-- analysis:end -->/;

/**
 * Writes the markdown report and its SVG charts (in `charts/` beside it). The prose is the template's
 * (benchmarks.template.md); this only fills its `{{name}}` slots with the run's tables, figures and charts, or a
 * slot's `{{name|text}}` fallback when the run has none. A hand-written analysis between the analysis markers of an
 * existing report is kept.
 */
export async function writeReport(run: RunResults, file: string, resultsPath: string): Promise<void> {
  const dir = path.dirname(file);
  const chartDir = path.join(dir, file.endsWith('benchmarks.md') ? 'charts' : `${path.basename(file, '.md')}-charts`);
  mkdirSync(chartDir, { recursive: true });
  const f = runFigures(run);
  const slots: Slots = { ...facts(f, resultsPath), ...tables(f), targetsTable: targetsTable(f) };
  for (const c of await renderCharts(f, chartDir))
    slots[`chart:${c.name}`] = `![${c.title}](${path.relative(dir, c.file)})`;
  slots.analysis = existsSync(file) ? ANALYSIS.exec(readFileSync(file, 'utf8'))?.[1]?.trim() : undefined;
  const text = readFileSync(TEMPLATE, 'utf8').replace(
    /\{\{([\w:-]+)(?:\|([^}]*))?\}\}/g,
    (_, name: string, fallback?: string) =>
      slots[name] || (fallback ?? (name.startsWith('chart:') ? '' : '_Not measured in this run._')),
  );
  writeFileSync(file, text);
}

type Slots = Record<string, string | undefined>;

/** The run's machine, settings and single figures the prose quotes; the settings under their own names. */
function facts({ run, ceiling, drift }: RunFigures, resultsPath: string): Slots {
  const { meta } = run;
  const { settings, startedAt, finishedAt } = meta;
  const example = (run.segments[0] ?? run.ceiling[0])?.measured.autocannon.flags;
  const clusterCeiling = run.ceiling.find((c) => c.instances > 1);
  const asText = (v: unknown) => (Number.isInteger(v) ? int(v as number) : String(v));
  return {
    ...Object.fromEntries(Object.entries({ ...meta, ...settings }).map(([name, v]) => [name, asText(v)])),
    date: startedAt.slice(0, 10),
    minutes: String(Math.round((Date.parse(finishedAt) - Date.parse(startedAt)) / 60000)),
    period: `${startedAt} – ${finishedAt}`,
    resultsName: path.basename(resultsPath),
    resultsPath,
    cpu: `${meta.cpus.count} × ${meta.cpus.model}`,
    cpuCount: String(meta.cpus.count),
    memory: `${(meta.memoryBytes / 2 ** 30).toFixed(1)} GiB`,
    disturbedCores: num(settings.disturbedCores),
    mixedSpread: pct(1 - settings.mixedHotShare),
    headlineSegments: String(HEADLINE_SEGMENTS),
    exampleFlags: example && `\`\`\`\n${example}\n\`\`\``,
    ceiling: int(ceiling),
    ceilingDrift: num(drift),
    clusterCeiling: clusterCeiling && int(clusterCeiling.perSecond),
    skipped: run.skipped.map((x) => `- ${x.scenario}: ${x.reason}`).join('\n'),
    incidents: run.incidents.map((x) => `- ${x}`).join('\n'),
  };
}

// Columns most tables share: a round's latency percentiles and its statuses.
const latency = <T>(round: (r: T) => RoundResult, ...keys: (keyof RoundResult['latencyMs'])[]): Column<T>[] =>
  keys.map((key) => [`${key.replace('_', '.')} ms`, (r) => ms(round(r).latencyMs[key])]);
const statuses = (counts: Record<string, number>) =>
  Object.entries(counts)
    .map(([status, n]) => `${status}: ${int(n)}`)
    .join(', ');
const statusColumn = <T>(round: (r: T) => RoundResult): Column<T> => [
  'Statuses',
  (r) => statuses(round(r).statusCounts),
];
const measured = (c: { measured: RoundResult }) => c.measured;
const ofRound = (r: { round: RoundResult }) => r.round;
const label = (header = 'Case'): Column<{ label: string }> => [header, (c) => c.label];
const orders: Column<SalesCase> = ['Orders/s', (c) => int(c.ordersPerSecond)];

/** Rows that read as answers per second of some round: the headline and CPU tables mix cases of every kind. */
type Answers = { label: string; perSecond: number; round: RoundResult; cpu: CpuUsage | null; sale?: SalesCase };
const sale = (c: SalesCase | undefined): Answers[] =>
  c ? [{ label: c.label, perSecond: c.ordersPerSecond, round: c.measured, cpu: c.cpu, sale: c }] : [];
const answers = (c: { label: string; perSecond: number; measured: RoundResult; cpu: CpuUsage | null }): Answers => ({
  ...c,
  round: c.measured,
});

/** Every table slot of the template. */
function tables(f: RunFigures): Slots {
  const { run } = f;
  const { disturbedCores } = run.meta.settings;
  const ofCeiling = (perSecond: number) => pct(perSecond / f.ceiling);
  const echoes = [...run.ceiling, ...run.bareEcho];
  const refusals = (suffix = '') =>
    run.soldOut.map((c) => answers({ ...c, label: c.label + suffix, perSecond: c.refusalsPerSecond }));
  const variants = (profile: Profile) =>
    [1, HEADLINE_SEGMENTS].flatMap((n) => [false, true].flatMap((on) => sale(f.variant(profile, n, on))));
  const clusterRows = run.cluster.flatMap((c) => [c, ...sale(f.at('real', c.segments)).map((r) => r.sale!)]);
  const product = [f.at('real', 1), f.at('real')].filter((c) => c !== undefined);
  /** Orders/s against the case of the same table whose `key` is `value`, then the columns such comparisons share. */
  const against = <K extends keyof SalesCase>(cases: SalesCase[], key: K, value: SalesCase[K], header: string) => {
    const base = cases.find((x) => x[key] === value)?.ordersPerSecond ?? NaN;
    const columns: Column<SalesCase>[] = [
      orders,
      [header, (c) => times(c.ordersPerSecond / base)],
      ...latency(measured, 'p50', 'p99'),
      statusColumn(measured),
      ['Service ms / order', (c) => ms(serviceMsPerAnswer(c.ordersPerSecond, c.cpu))],
    ];
    return columns;
  };
  const onRedis = (c: SalesCase) => run.lockOrderFlow.find((x) => x.lockBackend === 'redis' && x.holdMs === c.holdMs);
  const others = (cores: number) => `${num(cores)} cores${cores > disturbedCores ? ': **disturbed**' : ''}`;
  const oversellVerdict = ({ books, ...c }: RunResults['oversell'][number]) => {
    if (expectedSafe(c)) return books.ok ? 'balanced' : 'FAILED';
    return books.oversold > 0 ? 'oversold, as expected without a shared lock' : 'no oversell this time';
  };
  const rss = (bytes = NaN) => (bytes > 0 ? `${mib(bytes)} MiB` : '–');
  const lifecycle = run.lifecycle.flatMap((c) => [
    { label: `place directly · ${c.label}`, perSecond: c.directPerSecond, ratio: 1, round: c.direct },
    {
      label: `reserve then confirm · ${c.label}`,
      perSecond: c.confirmedPerSecond,
      ratio: c.confirmedPerSecond / c.directPerSecond,
      round: c.reserveThenConfirm,
    },
  ]);
  const dashboardRounds = run.dashboard.flatMap((c) =>
    c.rounds.map((r) => ({ ...r, events: r.label.includes('watching') ? int(c.minEventsPerWatcher) : '–' })),
  );
  return {
    headlineTable: table(
      [
        ...run.bareEcho.map(answers),
        ...f.ceilings.map(answers),
        ...run.alternative.flatMap(sale),
        ...variants('real'),
        ...sale(f.traffic('spread')),
        ...sale(f.traffic('mixed')),
        ...refusals(' (409s)'),
        ...variants('business-step'),
      ],
      [
        label(),
        ['Answers/s', (r) => int(r.perSecond)],
        ['× the alternative (same traffic)', (r) => (r.sale ? times(f.overAlternative(r.sale)) : '–')],
        ['% of bare echo', (r) => pct(r.perSecond / f.bareEcho)],
        ['% of ceiling', (r) => ofCeiling(r.perSecond)],
        ...latency(ofRound, 'p50', 'p99'),
        statusColumn(ofRound),
        ['Other processes', (r) => (r.cpu ? others(r.cpu.cores.others) : '–')],
      ],
    ),
    ceilingTable: table(echoes, [
      label(),
      ['Answers/s', (c) => int(c.perSecond)],
      ...latency(measured, 'p50', 'p97_5', 'p99', 'max'),
      ['Requests', (c) => int(c.measured.responses)],
      statusColumn(measured),
    ]),
    realTables: salesTables(f.allOf('real'), f),
    stepTables: salesTables(f.allOf('business-step'), f),
    clusterTables: salesTables(clusterRows, f, true),
    oversellTable: table(run.oversell, [
      ['Guard', (c) => c.label.replace(/^oversell · /, '').replace(/ · \d+ instances?$/, '')],
      ['Instances', (c) => c.instances],
      ['Stock', (c) => int(c.stock)],
      ['Requests', (c) => int(c.requests)],
      ['Answers', (c) => statuses(c.round.statusCounts)],
      ['Units sold (ledger)', (c) => int(c.books.sold)],
      ['Left', (c) => int(c.books.available)],
      ['Oversold', (c) => `**${int(c.books.oversold)}**`],
      ['Books', oversellVerdict],
    ]),
    soldOutTable: table(run.soldOut, [
      label(),
      ['409/s', (c) => int(c.refusalsPerSecond)],
      ['% of ceiling', (c) => ofCeiling(c.refusalsPerSecond)],
      ...latency(measured, 'p50', 'p99', 'max'),
      ['Lock attempts / request', (c) => num(c.lockAttemptsPerRequest ?? NaN, 3)],
      statusColumn(measured),
      ['Then: next order', ({ reopen: r }) => `${r.how} → ${r.firstOrderStatus} in ${ms(r.firstOrderMs)} ms`],
    ]),
    lifecycleTable: table(lifecycle, [
      label(),
      ['Confirmed orders/s', (r) => int(r.perSecond)],
      ['vs placing directly', (r) => `×${num(r.ratio)}`],
      ['Requests/s', (r) => int(Object.values(r.round.ratePerSecond).reduce((a, b) => a + b, 0))],
      ...latency(ofRound, 'p50', 'p99'),
      statusColumn(ofRound),
    ]),
    ...perOrderTables(run.perOrder.filter((c) => c.serverCost)),
    lockFreeTable: run.lockFree.length ? salesTable([...product, ...run.alternative, ...run.lockFree], f) : undefined,
    memoryTable: table(run.memory, [
      label(),
      orders,
      ...latency(measured, 'p99', 'max'),
      statusColumn(measured),
      ['RSS max in round', (c) => rss(c.memory?.maxRssBytes)],
      ['Peak RSS', (c) => rss(c.memory?.peakRssBytes)],
    ]),
    growthTable: table(run.growth, [
      ['Ledger rows', (c) => int(c.ledgerRows)],
      ['Seeded in', (c) => (c.ledgerRows ? `${c.seedSeconds.toFixed(0)} s` : '–')],
      ['SKU view/s', (c) => int(c.skuRead.ratePerSecond[200] ?? 0)],
      ['SKU view p50 ms', (c) => ms(c.skuRead.latencyMs.p50)],
      ['p99 ms', (c) => ms(c.skuRead.latencyMs.p99)],
      ['Orders/s', (c) => int(c.orders.ratePerSecond[201] ?? 0)],
      ['Order p50 ms', (c) => ms(c.orders.latencyMs.p50)],
      ['p99 ms', (c) => ms(c.orders.latencyMs.p99)],
      ['Books', (c) => (c.booksOk ? 'balanced' : 'FAILED')],
    ]),
    dashboardTable: table(dashboardRounds, [
      label('Round'),
      ['Orders/s', (r) => int(r.round.ratePerSecond[201] ?? 0)],
      ...latency(ofRound, 'p50', 'p99'),
      statusColumn(ofRound),
      ['Stream chunks, least served watcher', (r) => r.events],
    ]),
    authTable: table(run.auth, [label('Credential'), ...against(run.auth, 'auth', 'none', '× no credential')]),
    eventsTable: table(run.events, [
      label('Events'),
      ...against(run.events, 'events', 'off', '× events off'),
      ['Webhook deliveries', (c) => (c.delivered === undefined ? '—' : int(c.delivered))],
      ['Outbox rows after', (c) => (c.outboxAfter === undefined ? '—' : int(c.outboxAfter))],
    ]),
    retentionTable: table(
      run.eventRetention.flatMap((c) => c.samples.map((x) => ({ ...x, keep: c.retentionSeconds }))),
      [
        ['Second', (x) => int(x.atSeconds)],
        ['Orders/s', (x) => int(x.ordersPerSecond)],
        ['Events kept', (x) => int(x.events)],
        ['≈ retention × rate', (x) => int(x.keep * x.ordersPerSecond)],
        ['Outbox rows', (x) => int(x.outbox)],
      ],
    ),
    locksTable: table(run.locks, [
      ['K', (r) => r.keys],
      ['H (ms)', (r) => r.holdMs],
      ['Lock', (r) => r.contender],
      ['Sections/s', (r) => int(r.sectionsPerSecond)],
      ['× baseline', (r) => num(r.sectionsPerSecond / lockBaseline(run.locks, r))],
      ['Max wait ms', (r) => int(r.maxWaitMs)],
      ['p99 wait ms', (r) => int(r.p99WaitMs)],
      ['Mean hold ms', (r) => num(r.meanHoldMs)],
      ['Errors', (r) => r.errors],
    ]),
    lockOrderFlowTable: table(run.lockOrderFlow, [
      ['Backend', (c) => c.lockBackend ?? '–'],
      ['Step ms', (c) => c.holdMs ?? 0],
      orders,
      ['× redis', (c) => num(c.ordersPerSecond / (onRedis(c)?.ordersPerSecond ?? NaN))],
      ...latency(measured, 'p99', 'max'),
      ['Not placed', (c) => int(c.measured.responses - (c.measured.statusCounts[201] ?? 0))],
    ]),
    cpuTable: cpuTable(
      [
        ...echoes.map(answers),
        ...[...f.allOf('real'), ...f.allOf('business-step')].flatMap(sale),
        ...[run.alternative, run.spread, run.cluster, run.lockFree, run.perOrder, run.memory, run.auth]
          .flat()
          .flatMap(sale),
        ...refusals(),
      ],
      disturbedCores,
    ),
  };
}

/** Where each round's CPU went, by process group, and what the groups spent per answer. */
function cpuTable(rows: Answers[], disturbedCores: number): string | undefined {
  const capitalise = (word: string) => word[0]!.toUpperCase() + word.slice(1);
  const groups = ['service', 'postgres', 'redis', 'load generator', 'others'] as const;
  const cores = groups.map((g): Column<Answers> => [
    g === 'others' ? 'Other processes' : capitalise(g),
    (r) => num(r.cpu!.cores[g]),
  ]);
  const perAnswer = groups
    .slice(0, 3)
    .map((g): Column<Answers> => [`${capitalise(g)} ms / answer`, (r) => ms((r.cpu!.cores[g] / r.perSecond) * 1000)]);
  const waited = (cpu: CpuUsage) => (cpu.waitedForQuietSeconds ? `${cpu.waitedForQuietSeconds.toFixed(0)} s` : '–');
  return table(
    rows.filter((r) => r.cpu),
    [
      label(),
      ['Answers/s', (r) => int(r.perSecond)],
      ['Machine busy', (r) => pct(r.cpu!.machineBusy)],
      ...cores,
      ...perAnswer,
      ['Waited for quiet', (r) => waited(r.cpu!)],
      ['Disturbed', (r) => (r.cpu!.cores.others > disturbedCores ? '**disturbed**' : 'no')],
    ],
  );
}

/** What a lock cell is compared with: the better peer library of its cell; comparing backends, the Redis backend. */
function lockBaseline(cells: RunResults['locks'], r: RunResults['locks'][number]): number {
  const cell = cells.filter((x) => x.keys === r.keys && x.holdMs === r.holdMs);
  const peers = cell.filter((x) => !isOurs(x.contender)).sort((a, b) => b.sectionsPerSecond - a.sectionsPerSecond);
  return (peers[0] ?? cell.find((x) => x.contender === 'backend:redis'))?.sectionsPerSecond ?? NaN;
}

/**
 * What an order costs each server, counted by the servers: the same cases on one Redis and on a Redis Cluster, with
 * the Redis load per node, so the spread over the shards shows.
 */
function perOrderTables(cases: SalesCase[]): Slots {
  const redis = (c: SalesCase) => c.serverCost!.redis;
  const pg = (c: SalesCase) => c.serverCost!.postgres;
  const cpuMs = (group: 'service' | 'postgres') => (c: SalesCase) =>
    ms(((c.cpu?.cores[group] ?? NaN) / c.ordersPerSecond) * 1000);
  const byCommand = (c: SalesCase) =>
    Object.entries(redis(c).byCommand)
      .map(([name, n]) => `${name} ${num(n, 3)}`)
      .join(', ');
  const statements = cases.filter((c) => c.redis === cases[0]?.redis);
  return {
    perOrderTable: table(cases, [
      label(),
      orders,
      ['Orders / lock hold', (c) => num(c.ordersPerSecond / (c.lock?.acquisitionsPerSecond || NaN), 1)],
      ['Service CPU ms', cpuMs('service')],
      ['Postgres CPU ms', cpuMs('postgres')],
      ['Postgres statements', (c) => num(pg(c)?.statementsPerOrder ?? NaN)],
      ['Postgres exec ms', (c) => num(pg(c)?.execMsPerOrder ?? NaN, 3)],
      ['Redis round trips', (c) => num(redis(c).scriptCallsPerOrder)],
      ['Redis commands on primaries', (c) => num(redis(c).commandsOnPrimariesPerOrder)],
      ['Redis CPU ms, all nodes', (c) => num(redis(c).cpuMsPerOrder, 3)],
      ['Redis CPU ms, busiest node', (c) => num(Math.max(...redis(c).nodes.map((n) => n.cpuMsPerOrder)), 3)],
    ]),
    perOrderNodes: table(
      cases.flatMap((c) => redis(c).nodes.map((n) => ({ c, n }))),
      [
        ['Case', ({ c }) => c.label],
        ['Node', ({ n }) => n.address],
        ['Role', ({ n }) => n.role],
        ['Commands / order', ({ n }) => num(n.commandsPerOrder)],
        ['CPU ms / order', ({ n }) => num(n.cpuMsPerOrder, 3)],
        ['Share of the Redis CPU', ({ c, n }) => pct(n.cpuMsPerOrder / redis(c).cpuMsPerOrder)],
      ],
    ),
    perOrderCommands: table(cases, [label(), ['Commands / order', byCommand]]),
    perOrderStatements: table(
      statements.flatMap((c) => (pg(c)?.top ?? []).map((st) => ({ c, st }))),
      [
        ['Case', ({ c }) => c.label],
        ['Statement', ({ st }) => `\`${st.query}\``],
        ['Calls / order', ({ st }) => num(st.perOrder, 3)],
        ['Mean exec ms', ({ st }) => num(st.meanMs, 3)],
      ],
    ),
  };
}

/** A comparison's throughput table and, for the cases of the product's own order flow, its lock table. */
function salesTables(cases: SalesCase[], f: RunFigures, showInstances = false): string | undefined {
  const lock = (c: SalesCase) => c.lock!;
  const bounded = (value: number, beyond: string, format: (n: number) => string) =>
    Number.isFinite(value) ? format(value) : beyond;
  const instances: Column<SalesCase>[] = showInstances ? [['Instances', (c) => c.instances]] : [];
  const lockTable = table(
    cases.filter((c) => c.lock),
    [
      label(),
      ...instances,
      ['Lock attempts / order', (c) => num(lock(c).lockAttemptsPerOrder)],
      ['Busy / order', (c) => num(lock(c).busyPerOrder)],
      ['Waits / order', (c) => num(lock(c).waitsPerOrder)],
      ['Segments tried p99', (c) => bounded(lock(c).segmentVisitsP99, '> 256', (n) => `≤ ${n}`)],
      ['Mean wait ms', (c) => ms(lock(c).meanLockWaitMs)],
      ['Wait p99 ≤ ms', (c) => bounded(lock(c).lockWaitP99Ms, '> 5,000', ms)],
      ['Mean hold ms', (c) => ms(lock(c).meanHoldMs)],
      ['Utilisation', (c) => num(lock(c).lockUtilisation)],
      ['Fenced out', (c) => int(lock(c).fencedOut)],
      ['Loop lag p99 ms', (c) => ms(lock(c).eventLoopLagP99Ms)],
    ],
  );
  return [salesTable(cases, f, instances), lockTable].filter(Boolean).join('\n\n') || undefined;
}

function salesTable(cases: SalesCase[], f: RunFigures, instances: Column<SalesCase>[] = []): string | undefined {
  const failed = (c: SalesCase) => [...c.books.checks, ...c.warmupBooks.checks].filter((k) => !k.ok).map((k) => k.name);
  return table(cases, [
    label(),
    ...instances,
    orders,
    // Only the product's own order flow has a single-lock case to compare with (the alternative has no lock).
    ['× single lock', (c) => (c.lock ? times(f.speedup(c)) : '–')],
    ['% of ceiling', (c) => pct(c.ordersPerSecond / f.ceiling)],
    ...latency(measured, 'p50', 'p97_5', 'p99', 'max'),
    ['Requests', (c) => int(c.measured.responses)],
    statusColumn(measured),
    ['Books', (c) => (failed(c).length ? `FAILED: ${failed(c).join('; ')}` : 'balanced')],
  ]);
}
