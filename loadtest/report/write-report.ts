import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { CpuUsage } from '../infra/cpu-usage.js';
import type { RoundResult } from '../runner/round.js';
import type { RunResults } from '../results.js';
import { HEADLINE_SEGMENTS } from '../scenarios/plan.js';
import type { CeilingCase, SalesCase } from '../scenarios/sales.js';
import { renderCharts } from './charts.js';
import { RunFigures, serviceMsPerAnswer } from './figures.js';
import { int, mib, ms, num, pct, statuses, table, times } from './format.js';
import { expectedSafe, isOurs, targetsTable } from './targets.js';

const TEMPLATE = new URL('../../../loadtest/report/benchmarks.template.md', import.meta.url);
const ANALYSIS = /<!-- analysis:begin -->\n?([\s\S]*?)\n?<!-- analysis:end -->/;

type Column<T> = [header: string, cell: (row: T) => string | number];
/** Rows that read as answers per second of some round: the headline, CPU and the like. */
type Answers = { label: string; perSecond: number; round: RoundResult; cpu: CpuUsage | null; sale?: SalesCase };

/**
 * Writes the markdown report and its SVG charts (in `charts/` beside it). The prose is the template's
 * (benchmarks.template.md); this only fills its `{{name}}` slots with the run's tables, figures and charts. A
 * hand-written analysis between the analysis markers of an existing report is kept.
 */
export async function writeReport(run: RunResults, file: string, resultsPath: string): Promise<void> {
  const dir = path.dirname(file);
  const chartDir = path.join(dir, file.endsWith('benchmarks.md') ? 'charts' : `${path.basename(file, '.md')}-charts`);
  mkdirSync(chartDir, { recursive: true });
  const slots = fill(run, resultsPath);
  for (const c of await renderCharts(run, chartDir))
    slots[`chart:${c.name}`] = `![${c.title}](${path.relative(dir, c.file)})`;
  const kept = existsSync(file) ? ANALYSIS.exec(readFileSync(file, 'utf8'))?.[1]?.trim() : undefined;
  slots.analysis = kept || '_No analysis has been written for this run yet._';
  const text = readFileSync(TEMPLATE, 'utf8').replace(/\{\{([\w:-]+)\}\}/g, (_, name: string) =>
    name.startsWith('chart:') ? (slots[name] ?? '') : (slots[name] ?? '_Not measured in this run._'),
  );
  writeFileSync(file, text);
}

/** Every slot of the template, from the run; a slot left undefined reads "not measured in this run". */
function fill(run: RunResults, resultsPath: string): Record<string, string | undefined> {
  const f = new RunFigures(run);
  const { meta } = run;
  const ofCeiling = (perSecond: number) => pct(perSecond / f.ceiling);
  const latency = <T>(round: (r: T) => RoundResult, ...keys: (keyof RoundResult['latencyMs'])[]): Column<T>[] =>
    keys.map((key) => [`${key.replace('_', '.')} ms`, (r) => ms(round(r).latencyMs[key])]);
  const answers = (
    label: string,
    perSecond: number,
    round: RoundResult,
    cpu: CpuUsage | null,
    sale?: SalesCase,
  ): Answers[] => [{ label, perSecond, round, cpu, sale }];
  const sale = (c: SalesCase | undefined) => (c ? answers(c.label, c.ordersPerSecond, c.measured, c.cpu, c) : []);
  const echo = (c: CeilingCase) => answers(c.label, c.perSecond, c.measured, c.cpu);
  const refusals = (suffix = '') =>
    run.soldOut.flatMap((c) => answers(`${c.label}${suffix}`, c.refusalsPerSecond, c.measured, c.cpu));
  const variants = (profile: 'real' | 'business-step') =>
    [1, HEADLINE_SEGMENTS].flatMap((n) => [false, true].flatMap((on) => sale(f.variant(profile, n, on))));
  const example = (run.segments[0] ?? run.ceiling[0])?.measured.autocannon.flags;
  const clusterCeiling = run.ceiling.find((c) => c.instances > 1);
  const clusterRows = run.cluster.flatMap((c) => [c, ...sale(f.at('real', c.segments)).map((r) => r.sale!)]);
  const perOrder = run.perOrder.filter((c) => c.serverCost);
  const product = [f.at('real', 1), f.at('real')].filter((c) => c !== undefined);
  const noCredential = run.auth.find((x) => x.auth === 'none')?.ordersPerSecond ?? NaN;
  const eventsOff = run.events?.find((x) => x.events === 'off')?.ordersPerSecond ?? NaN;
  const settings = Object.entries(meta.settings).map(([name, v]) => [
    name,
    Number.isInteger(v) ? int(v as number) : String(v),
  ]);
  return {
    ...Object.fromEntries(settings),
    date: meta.startedAt.slice(0, 10),
    commit: meta.gitCommit,
    command: meta.command,
    mode: meta.mode,
    minutes: String(Math.round((Date.parse(meta.finishedAt) - Date.parse(meta.startedAt)) / 60000)),
    resultsName: path.basename(resultsPath),
    resultsPath,
    cpu: `${meta.cpus.count} × ${meta.cpus.model}`,
    cpuCount: String(meta.cpus.count),
    memory: `${(meta.memoryBytes / 2 ** 30).toFixed(1)} GiB`,
    os: meta.os,
    node: meta.node,
    period: `${meta.startedAt} – ${meta.finishedAt}`,
    target: meta.target,
    backing: meta.backing,
    disturbedCores: num(meta.settings.disturbedCores),
    mixedSpread: pct(1 - meta.settings.mixedHotShare),
    headlineSegments: String(HEADLINE_SEGMENTS),
    exampleFlags: example && `\`\`\`\n${example}\n\`\`\``,
    ceiling: int(f.ceiling),
    ceilingDrift: num(f.ceilingDrift),
    clusterCeiling: clusterCeiling && int(clusterCeiling.perSecond),
    targetsTable: targetsTable(run),
    headlineTable: table(
      [
        ...run.bareEcho.flatMap(echo),
        ...f.ceilings.flatMap(echo),
        ...run.alternative.flatMap(sale),
        ...variants('real'),
        ...sale(f.traffic('spread')),
        ...sale(f.traffic('mixed')),
        ...refusals(' (409s)'),
        ...variants('business-step'),
      ],
      [
        ['Case', (r) => r.label],
        ['Answers/s', (r) => int(r.perSecond)],
        ['× the alternative (same traffic)', (r) => (r.sale ? times(f.overAlternative(r.sale)) : '–')],
        ['% of bare echo', (r) => pct(r.perSecond / f.bareEcho)],
        ['% of ceiling', (r) => ofCeiling(r.perSecond)],
        ...latency((r: Answers) => r.round, 'p50', 'p99'),
        ['Statuses', (r) => statuses(r.round.statusCounts)],
        [
          'Other processes',
          (r) =>
            r.cpu
              ? `${num(r.cpu.cores.others)} cores${r.cpu.cores.others > meta.settings.disturbedCores ? ': **disturbed**' : ''}`
              : '–',
        ],
      ],
    ),
    ceilingTable: table(
      [...run.ceiling, ...run.bareEcho],
      [
        ['Case', (c) => c.label],
        ['Answers/s', (c) => int(c.perSecond)],
        ...latency((c: CeilingCase) => c.measured, 'p50', 'p97_5', 'p99', 'max'),
        ['Requests', (c) => int(c.measured.responses)],
        ['Statuses', (c) => statuses(c.measured.statusCounts)],
      ],
    ),
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
      ['Books', (c) => (expectedSafe(c) ? (c.books.ok ? 'balanced' : 'FAILED') : oversoldAsExpected(c.books.oversold))],
    ]),
    soldOutTable: table(run.soldOut, [
      ['Case', (c) => c.label],
      ['409/s', (c) => int(c.refusalsPerSecond)],
      ['% of ceiling', (c) => ofCeiling(c.refusalsPerSecond)],
      ...latency((c: (typeof run.soldOut)[number]) => c.measured, 'p50', 'p99', 'max'),
      ['Lock attempts / request', (c) => num(c.lockAttemptsPerRequest ?? NaN, 3)],
      ['Statuses', (c) => statuses(c.measured.statusCounts)],
      ['Then: next order', ({ reopen: r }) => `${r.how} → ${r.firstOrderStatus} in ${ms(r.firstOrderMs)} ms`],
    ]),
    lifecycleTable: table(
      run.lifecycle.flatMap((c) => [
        { label: `place directly · ${c.label}`, perSecond: c.directPerSecond, ratio: 1, round: c.direct },
        {
          label: `reserve then confirm · ${c.label}`,
          perSecond: c.confirmedPerSecond,
          ratio: c.confirmedPerSecond / c.directPerSecond,
          round: c.reserveThenConfirm,
        },
      ]),
      [
        ['Case', (r) => r.label],
        ['Confirmed orders/s', (r) => int(r.perSecond)],
        ['vs placing directly', (r) => `×${num(r.ratio)}`],
        ['Requests/s', (r) => int(Object.values(r.round.ratePerSecond).reduce((a, b) => a + b, 0))],
        ...latency((r: { round: RoundResult }) => r.round, 'p50', 'p99'),
        ['Statuses', (r) => statuses(r.round.statusCounts)],
      ],
    ),
    ...perOrderTables(perOrder),
    lockFreeTable: run.lockFree.length ? salesTable([...product, ...run.alternative, ...run.lockFree], f) : undefined,
    memoryTable: table(run.memory, [
      ['Case', (c) => c.label],
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      ...latency((c: SalesCase) => c.measured, 'p99', 'max'),
      ['Statuses', (c) => statuses(c.measured.statusCounts)],
      ['RSS max in round', (c) => mib(c.memory?.maxRssBytes ?? NaN)],
      ['Peak RSS', (c) => mib(c.memory?.peakRssBytes ?? NaN)],
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
    dashboardTable: table(
      run.dashboard.flatMap((c) =>
        c.rounds.map((r) => ({ ...r, events: r.label.includes('watching') ? int(c.minEventsPerWatcher) : '–' })),
      ),
      [
        ['Round', (r) => r.label],
        ['Orders/s', (r) => int(r.round.ratePerSecond[201] ?? 0)],
        ...latency((r: { round: RoundResult }) => r.round, 'p50', 'p99'),
        ['Statuses', (r) => statuses(r.round.statusCounts)],
        ['Stream chunks, least served watcher', (r) => r.events],
      ],
    ),
    authTable: table(run.auth, [
      ['Credential', (c) => c.label],
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      ['× no credential', (c) => times(c.ordersPerSecond / noCredential)],
      ...latency((c: SalesCase) => c.measured, 'p50', 'p99'),
      ['Statuses', (c) => statuses(c.measured.statusCounts)],
      ['Service ms / order', (c) => ms(serviceMsPerAnswer(c.ordersPerSecond, c.cpu))],
    ]),
    eventsTable: table(run.events ?? [], [
      ['Events', (c) => c.label],
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      ['× events off', (c) => times(c.ordersPerSecond / eventsOff)],
      ...latency((c: SalesCase) => c.measured, 'p50', 'p99'),
      ['Statuses', (c) => statuses(c.measured.statusCounts)],
      ['Service ms / order', (c) => ms(serviceMsPerAnswer(c.ordersPerSecond, c.cpu))],
      ['Webhook deliveries', (c) => (c.delivered === undefined ? '—' : int(c.delivered))],
      ['Outbox rows after', (c) => (c.outboxAfter === undefined ? '—' : int(c.outboxAfter))],
    ]),
    retentionTable: table(
      (run.eventRetention ?? []).flatMap((c) => c.samples.map((x) => ({ ...x, keep: c.retentionSeconds }))),
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
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      [
        '× redis',
        (c) =>
          num(
            c.ordersPerSecond /
              (run.lockOrderFlow.find((x) => x.lockBackend === 'redis' && x.holdMs === c.holdMs)?.ordersPerSecond ??
                NaN),
          ),
      ],
      ...latency((c: SalesCase) => c.measured, 'p99', 'max'),
      ['Not placed', (c) => int(c.measured.responses - (c.measured.statusCounts[201] ?? 0))],
    ]),
    cpuTable: table(
      [...run.ceiling, ...run.bareEcho]
        .flatMap(echo)
        .concat(
          [
            ...f.allOf('real'),
            ...f.allOf('business-step'),
            ...run.alternative,
            ...run.spread,
            ...run.cluster,
            ...run.lockFree,
            ...run.perOrder,
            ...run.memory,
            ...run.auth,
          ].flatMap(sale),
          refusals(),
        )
        .filter((r) => r.cpu),
      [
        ['Case', (r) => r.label],
        ['Answers/s', (r) => int(r.perSecond)],
        ['Machine busy', (r) => pct(r.cpu!.machineBusy)],
        ...(['service', 'postgres', 'redis', 'load generator', 'others'] as const).map((g): Column<Answers> => [
          g === 'others' ? 'Other processes' : capitalise(g),
          (r) => num(r.cpu!.cores[g]),
        ]),
        ...(['service', 'postgres', 'redis'] as const).map((g): Column<Answers> => [
          `${capitalise(g)} ms / answer`,
          (r) => ms((r.cpu!.cores[g] / r.perSecond) * 1000),
        ]),
        [
          'Waited for quiet',
          (r) => (r.cpu!.waitedForQuietSeconds ? `${r.cpu!.waitedForQuietSeconds.toFixed(0)} s` : '–'),
        ],
        ['Disturbed', (r) => (r.cpu!.cores.others > meta.settings.disturbedCores ? '**disturbed**' : 'no')],
      ],
    ),
    skipped: run.skipped.map((x) => `- ${x.scenario}: ${x.reason}`).join('\n') || 'Every scenario selected ran.',
    incidents: run.incidents.map((x) => `- ${x}`).join('\n') || 'None in this run.',
  };
}

const capitalise = (word: string) => word[0]!.toUpperCase() + word.slice(1);
const oversoldAsExpected = (units: number) =>
  units > 0 ? 'oversold, as expected without a shared lock' : 'no oversell this time';

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
function perOrderTables(cases: SalesCase[]): Record<string, string | undefined> {
  const redis = (c: SalesCase) => c.serverCost!.redis;
  const pg = (c: SalesCase) => c.serverCost!.postgres;
  const cpuMs = (c: SalesCase, group: 'service' | 'postgres') =>
    ms(((c.cpu?.cores[group] ?? NaN) / c.ordersPerSecond) * 1000);
  return {
    perOrderTable: table(cases, [
      ['Case', (c) => c.label],
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      ['Orders / lock hold', (c) => num(c.ordersPerSecond / (c.lock?.acquisitionsPerSecond || NaN), 1)],
      ['Service CPU ms', (c) => cpuMs(c, 'service')],
      ['Postgres CPU ms', (c) => cpuMs(c, 'postgres')],
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
    perOrderCommands: table(cases, [
      ['Case', (c) => c.label],
      [
        'Commands / order',
        (c) =>
          Object.entries(redis(c).byCommand)
            .map(([name, n]) => `${name} ${num(n, 3)}`)
            .join(', '),
      ],
    ]),
    perOrderStatements: table(
      cases.filter((c) => c.redis === cases[0]?.redis).flatMap((c) => (pg(c)?.top ?? []).map((st) => ({ c, st }))),
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
  const withLock = cases.filter((c) => c.lock);
  const lock = (c: SalesCase) => c.lock!;
  const bounded = (value: number, beyond: string, format: (n: number) => string) =>
    Number.isFinite(value) ? format(value) : beyond;
  const lockTable = table(withLock, [
    ['Case', (c) => c.label],
    ...(showInstances ? [['Instances', (c: SalesCase) => c.instances] as Column<SalesCase>] : []),
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
  ]);
  return [salesTable(cases, f, showInstances), lockTable].filter(Boolean).join('\n\n') || undefined;
}

function salesTable(cases: SalesCase[], f: RunFigures, showInstances = false): string | undefined {
  const failed = (c: SalesCase) => [...c.books.checks, ...c.warmupBooks.checks].filter((k) => !k.ok).map((k) => k.name);
  return table(cases, [
    ['Case', (c) => c.label],
    ...(showInstances ? [['Instances', (c: SalesCase) => c.instances] as Column<SalesCase>] : []),
    ['Orders/s', (c) => int(c.ordersPerSecond)],
    // Only the product's own order flow has a single-lock case to compare with (the alternative has no lock).
    ['× single lock', (c) => (c.lock ? times(f.speedup(c)) : '–')],
    ['% of ceiling', (c) => pct(c.ordersPerSecond / f.ceiling)],
    ...(['p50', 'p97_5', 'p99', 'max'] as const).map((key): Column<SalesCase> => [
      `${key.replace('_', '.')} ms`,
      (c) => ms(c.measured.latencyMs[key]),
    ]),
    ['Requests', (c) => int(c.measured.responses)],
    ['Statuses', (c) => statuses(c.measured.statusCounts)],
    ['Books', (c) => (failed(c).length ? `FAILED: ${failed(c).join('; ')}` : 'balanced')],
  ]);
}
