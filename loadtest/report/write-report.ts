import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { CpuUsage } from '../infra/cpu-usage.js';
import type { RoundResult } from '../runner/round.js';
import type { RunResults } from '../cli.js';
import { HEADLINE_SEGMENTS } from '../scenarios/plan.js';
import type { CeilingCase, Profile, SalesCase } from '../scenarios/sales.js';
import { renderCharts } from './charts.js';
import { expectedSafe, isOurs, targetsTable } from './targets.js';

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
  const slots = fill(run, resultsPath);
  for (const c of await renderCharts(run, chartDir))
    slots[`chart:${c.name}`] = `![${c.title}](${path.relative(dir, c.file)})`;
  slots.analysis = existsSync(file) ? ANALYSIS.exec(readFileSync(file, 'utf8'))?.[1]?.trim() : undefined;
  const text = readFileSync(TEMPLATE, 'utf8').replace(
    /\{\{([\w:-]+)(?:\|([^}]*))?\}\}/g,
    (_, name: string, fallback?: string) =>
      slots[name] || (fallback ?? (name.startsWith('chart:') ? '' : '_Not measured in this run._')),
  );
  writeFileSync(file, text);
}

// Number formatting: fixed, locale-independent; '–' for what was not measured.
const finite = (format: (n: number) => string) => (n: number) => (Number.isFinite(n) ? format(n) : '–');
export const int = finite((n) => Math.round(n).toLocaleString('en-US'));
export const ms = finite((n) => (n >= 100 ? int(n) : n.toFixed(n >= 10 ? 1 : 2)));
export const pct = finite((n) => `${(n * 100).toFixed(n < 0.1 ? 1 : 0)} %`);
export const times = finite((n) => `×${n.toFixed(n >= 10 ? 1 : 2)}`);
export const num = (n: number, digits = 2) => finite((x) => x.toFixed(digits))(n);
const mib = (bytes: number) => (bytes > 0 ? `${(bytes / 2 ** 20).toFixed(0)} MiB` : '–');
const statuses = (counts: Record<string, number>) =>
  Object.entries(counts)
    .map(([status, n]) => `${status}: ${int(n)}`)
    .join(', ');

type Column<T> = [header: string, cell: (row: T) => string | number];

/** A markdown table from rows and one `[header, cell]` per column; undefined (not measured) when there are no rows. */
export function table<T>(rows: T[], columns: Column<T>[], align = 'lr'): string | undefined {
  if (!rows.length) return undefined;
  const line = (cells: (string | number)[]) => `| ${cells.map((c) => String(c).replace(/\|/g, '\\|')).join(' | ')} |`;
  const rule = columns.map((_, i) => ((align[i] ?? align.at(-1)) === 'r' ? '---:' : ':---'));
  return [line(columns.map(([header]) => header)), `|${rule.join('|')}|`]
    .concat(rows.map((r) => line(columns.map(([, cell]) => cell(r)))))
    .join('\n');
}

// Columns most tables share: a round's latency percentiles and its statuses.
type Percentile = keyof RoundResult['latencyMs'];
const latency = <T>(round: (r: T) => RoundResult, ...keys: Percentile[]): Column<T>[] =>
  keys.map((key) => [`${key.replace('_', '.')} ms`, (r) => ms(round(r).latencyMs[key])]);
const statusColumn = <T>(round: (r: T) => RoundResult): Column<T> => [
  'Statuses',
  (r) => statuses(round(r).statusCounts),
];
const measured = (c: { measured: RoundResult }) => c.measured;
const ofRound = (r: { round: RoundResult }) => r.round;
const label = (header = 'Case'): Column<{ label: string }> => [header, (c) => c.label];
const mean = (values: number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : NaN);

export function serviceMsPerAnswer(perSecond: number, cpu: CpuUsage | null): number {
  return cpu && perSecond > 0 ? (cpu.cores.service / perSecond) * 1000 : NaN;
}

/** The figures the targets, tables and charts are stated in, derived once from a run. */
export class RunFigures {
  /** Single-instance ceilings measured in this run (first and last). */
  readonly ceilings: CeilingCase[];
  /** The HTTP ceiling every other figure is a fraction of: the mean of the single-instance measurements. */
  readonly ceiling: number;
  /** Last ceiling / first ceiling: how much the machine drifted during the run. */
  readonly ceilingDrift: number;
  /** Service CPU per echo answer: unlike rates, it barely moves when other processes load the machine. */
  readonly ceilingServiceMsPerAnswer: number;
  /** Answers/s of the bare express JSON echo: the limit of any express order service here. */
  readonly bareEcho: number;

  constructor(readonly run: RunResults) {
    const ceilings = (this.ceilings = run.ceiling.filter((c) => c.instances === 1));
    this.ceiling = mean(ceilings.map((c) => c.perSecond));
    this.ceilingDrift = ceilings.length > 1 ? ceilings.at(-1)!.perSecond / ceilings[0]!.perSecond : NaN;
    this.ceilingServiceMsPerAnswer = mean(
      ceilings.map((c) => serviceMsPerAnswer(c.perSecond, c.cpu)).filter(Number.isFinite),
    );
    this.bareEcho = run.bareEcho[0]?.perSecond ?? NaN;
  }

  /** A profile's sweep: the real section as shipped (combining on), the business step with combining off. */
  profile(profile: Profile): SalesCase[] {
    const combining = profile === 'real';
    return this.run.segments
      .filter((c) => c.profile === profile && c.combining === combining)
      .sort((a, b) => a.segments - b.segments);
  }

  at(profile: Profile, segments = HEADLINE_SEGMENTS): SalesCase | undefined {
    return this.profile(profile).find((c) => c.segments === segments);
  }

  variant(profile: Profile, segments: number, combining: boolean): SalesCase | undefined {
    return this.run.segments.find((c) => c.profile === profile && c.segments === segments && c.combining === combining);
  }

  /** Every case of the profile: the sweep, then the other combining mode's rows. */
  allOf(profile: Profile): SalesCase[] {
    const sweep = this.profile(profile);
    return [...sweep, ...this.run.segments.filter((c) => c.profile === profile && !sweep.includes(c))];
  }

  /** The alternative on the same traffic as a case (one hot SKU, spread or mixed). */
  alternativeFor(c: { traffic?: string }): SalesCase | undefined {
    return this.run.alternative.find((a) => a.traffic === c.traffic);
  }

  traffic(traffic: 'spread' | 'mixed'): SalesCase | undefined {
    return this.run.spread.find((c) => c.traffic === traffic);
  }

  overAlternative(c: SalesCase): number {
    return c.ordersPerSecond / (this.alternativeFor(c)?.ordersPerSecond ?? NaN);
  }

  /** Orders/s relative to the single lock of the same profile and combining mode. */
  speedup(c: SalesCase): number {
    return c.ordersPerSecond / (this.variant(c.profile, 1, c.combining)?.ordersPerSecond ?? NaN);
  }
}

/** Rows that read as answers per second of some round: the headline and CPU tables mix cases of every kind. */
type Answers = { label: string; perSecond: number; round: RoundResult; cpu: CpuUsage | null; sale?: SalesCase };
const sale = (c: SalesCase | undefined): Answers[] =>
  c ? [{ label: c.label, perSecond: c.ordersPerSecond, round: c.measured, cpu: c.cpu, sale: c }] : [];
const echo = (c: CeilingCase): Answers => ({ label: c.label, perSecond: c.perSecond, round: c.measured, cpu: c.cpu });

/** Every slot of the template, from the run; a slot left undefined takes the template's fallback. */
function fill(run: RunResults, resultsPath: string): Record<string, string | undefined> {
  const f = new RunFigures(run);
  const { meta } = run;
  const { disturbedCores } = meta.settings;
  const ofCeiling = (perSecond: number) => pct(perSecond / f.ceiling);
  const refusals = (suffix = '') =>
    run.soldOut.map<Answers>((c) => ({
      label: c.label + suffix,
      perSecond: c.refusalsPerSecond,
      round: c.measured,
      cpu: c.cpu,
    }));
  const variants = (profile: Profile) =>
    [1, HEADLINE_SEGMENTS].flatMap((n) => [false, true].flatMap((on) => sale(f.variant(profile, n, on))));
  const example = (run.segments[0] ?? run.ceiling[0])?.measured.autocannon.flags;
  const clusterCeiling = run.ceiling.find((c) => c.instances > 1);
  const clusterRows = run.cluster.flatMap((c) => [c, ...sale(f.at('real', c.segments)).map((r) => r.sale!)]);
  const product = [f.at('real', 1), f.at('real')].filter((c) => c !== undefined);
  /** Orders/s against another case of the same table, found by a field's value. */
  const ratioTo = <K extends keyof SalesCase>(cases: SalesCase[], key: K, value: SalesCase[K]) => {
    const base = cases.find((x) => x[key] === value)?.ordersPerSecond ?? NaN;
    return (c: SalesCase) => times(c.ordersPerSecond / base);
  };
  const serviceMs: Column<SalesCase> = ['Service ms / order', (c) => ms(serviceMsPerAnswer(c.ordersPerSecond, c.cpu))];
  const settings = Object.entries(meta.settings).map(([name, v]) => [
    name,
    Number.isInteger(v) ? int(v as number) : String(v),
  ]);
  const onRedis = (c: SalesCase) => run.lockOrderFlow.find((x) => x.lockBackend === 'redis' && x.holdMs === c.holdMs);
  const others = (cores: number) => `${num(cores)} cores${cores > disturbedCores ? ': **disturbed**' : ''}`;
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
    disturbedCores: num(disturbedCores),
    mixedSpread: pct(1 - meta.settings.mixedHotShare),
    headlineSegments: String(HEADLINE_SEGMENTS),
    exampleFlags: example && `\`\`\`\n${example}\n\`\`\``,
    ceiling: int(f.ceiling),
    ceilingDrift: num(f.ceilingDrift),
    clusterCeiling: clusterCeiling && int(clusterCeiling.perSecond),
    targetsTable: targetsTable(run),
    headlineTable: table(
      [
        ...run.bareEcho.map(echo),
        ...f.ceilings.map(echo),
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
    ceilingTable: table(
      [...run.ceiling, ...run.bareEcho],
      [
        label(),
        ['Answers/s', (c) => int(c.perSecond)],
        ...latency(measured, 'p50', 'p97_5', 'p99', 'max'),
        ['Requests', (c) => int(c.measured.responses)],
        statusColumn(measured),
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
      [
        'Books',
        ({ books, ...c }) =>
          expectedSafe(c)
            ? books.ok
              ? 'balanced'
              : 'FAILED'
            : books.oversold > 0
              ? 'oversold, as expected without a shared lock'
              : 'no oversell this time',
      ],
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
        label(),
        ['Confirmed orders/s', (r) => int(r.perSecond)],
        ['vs placing directly', (r) => `×${num(r.ratio)}`],
        ['Requests/s', (r) => int(Object.values(r.round.ratePerSecond).reduce((a, b) => a + b, 0))],
        ...latency(ofRound, 'p50', 'p99'),
        statusColumn(ofRound),
      ],
    ),
    ...perOrderTables(run.perOrder.filter((c) => c.serverCost)),
    lockFreeTable: run.lockFree.length ? salesTable([...product, ...run.alternative, ...run.lockFree], f) : undefined,
    memoryTable: table(run.memory, [
      label(),
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      ...latency(measured, 'p99', 'max'),
      statusColumn(measured),
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
        label('Round'),
        ['Orders/s', (r) => int(r.round.ratePerSecond[201] ?? 0)],
        ...latency(ofRound, 'p50', 'p99'),
        statusColumn(ofRound),
        ['Stream chunks, least served watcher', (r) => r.events],
      ],
    ),
    authTable: table(run.auth, [
      label('Credential'),
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      ['× no credential', ratioTo(run.auth, 'auth', 'none')],
      ...latency(measured, 'p50', 'p99'),
      statusColumn(measured),
      serviceMs,
    ]),
    eventsTable: table(run.events, [
      label('Events'),
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      ['× events off', ratioTo(run.events, 'events', 'off')],
      ...latency(measured, 'p50', 'p99'),
      statusColumn(measured),
      serviceMs,
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
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      ['× redis', (c) => num(c.ordersPerSecond / (onRedis(c)?.ordersPerSecond ?? NaN))],
      ...latency(measured, 'p99', 'max'),
      ['Not placed', (c) => int(c.measured.responses - (c.measured.statusCounts[201] ?? 0))],
    ]),
    cpuTable: cpuTable(
      [...run.ceiling, ...run.bareEcho]
        .map(echo)
        .concat(
          [
            ...f.allOf('real'),
            ...f.allOf('business-step'),
            ...[run.alternative, run.spread, run.cluster, run.lockFree, run.perOrder, run.memory, run.auth].flat(),
          ].flatMap(sale),
          refusals(),
        ),
      disturbedCores,
    ),
    skipped: run.skipped.map((x) => `- ${x.scenario}: ${x.reason}`).join('\n'),
    incidents: run.incidents.map((x) => `- ${x}`).join('\n'),
  };
}

/** Where each round's CPU went, by process group, and what the groups spent per answer. */
function cpuTable(rows: Answers[], disturbedCores: number): string | undefined {
  const capitalise = (word: string) => word[0]!.toUpperCase() + word.slice(1);
  const groups = ['service', 'postgres', 'redis', 'load generator', 'others'] as const;
  return table(
    rows.filter((r) => r.cpu),
    [
      label(),
      ['Answers/s', (r) => int(r.perSecond)],
      ['Machine busy', (r) => pct(r.cpu!.machineBusy)],
      ...groups.map((g): Column<Answers> => [
        g === 'others' ? 'Other processes' : capitalise(g),
        (r) => num(r.cpu!.cores[g]),
      ]),
      ...groups
        .slice(0, 3)
        .map((g): Column<Answers> => [
          `${capitalise(g)} ms / answer`,
          (r) => ms((r.cpu!.cores[g] / r.perSecond) * 1000),
        ]),
      [
        'Waited for quiet',
        ({ cpu }) => (cpu!.waitedForQuietSeconds ? `${cpu!.waitedForQuietSeconds.toFixed(0)} s` : '–'),
      ],
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
function perOrderTables(cases: SalesCase[]): Record<string, string | undefined> {
  const redis = (c: SalesCase) => c.serverCost!.redis;
  const pg = (c: SalesCase) => c.serverCost!.postgres;
  const cpuMs = (group: 'service' | 'postgres') => (c: SalesCase) =>
    ms(((c.cpu?.cores[group] ?? NaN) / c.ordersPerSecond) * 1000);
  return {
    perOrderTable: table(cases, [
      label(),
      ['Orders/s', (c) => int(c.ordersPerSecond)],
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
    perOrderCommands: table(cases, [
      label(),
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
    ['Orders/s', (c) => int(c.ordersPerSecond)],
    // Only the product's own order flow has a single-lock case to compare with (the alternative has no lock).
    ['× single lock', (c) => (c.lock ? times(f.speedup(c)) : '–')],
    ['% of ceiling', (c) => pct(c.ordersPerSecond / f.ceiling)],
    ...latency(measured, 'p50', 'p97_5', 'p99', 'max'),
    ['Requests', (c) => int(c.measured.responses)],
    statusColumn(measured),
    ['Books', (c) => (failed(c).length ? `FAILED: ${failed(c).join('; ')}` : 'balanced')],
  ]);
}
