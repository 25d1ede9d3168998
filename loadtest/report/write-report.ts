import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { CpuUsage } from '../infra/cpu-usage.js';
import type { CeilingCase, RunResults, SalesCase } from '../results.js';
import type { RoundResult } from '../runner/round.js';
import { HEADLINE_SEGMENTS } from '../scenarios/run-all.js';
import { renderCharts } from './charts.js';
import { RunFigures } from './figures.js';
import { int, mark, mib, ms, num, pct, statuses, table, times } from './format.js';
import { evaluateTargets, expectedSafe } from './targets.js';

const TEMPLATE = new URL('../../../loadtest/report/benchmarks.template.md', import.meta.url);
const ANALYSIS = /<!-- analysis:begin -->\n?([\s\S]*?)\n?<!-- analysis:end -->/;
const NOT_MEASURED = '_Not measured in this run._';

/**
 * Writes the markdown report and its SVG charts (in `charts/` beside it). The prose is the template's
 * (benchmarks.template.md); this fills in its `{{name}}` slots with the run's tables, figures and charts. A
 * hand-written analysis between the analysis markers of an existing report is kept.
 */
export async function writeReport(run: RunResults, file: string, resultsPath: string): Promise<void> {
  const dir = path.dirname(file);
  const chartDir = path.join(dir, file.endsWith('benchmarks.md') ? 'charts' : `${path.basename(file, '.md')}-charts`);
  mkdirSync(chartDir, { recursive: true });
  const slots = fill(run, resultsPath);
  for (const c of await renderCharts(run, chartDir)) {
    slots[`chart:${path.basename(c.file, '.svg')}`] = `![${c.title}](${path.relative(dir, c.file)})`;
  }
  const kept = existsSync(file) ? ANALYSIS.exec(readFileSync(file, 'utf8'))?.[1]?.trim() : undefined;
  slots.analysis = kept || '_No analysis has been written for this run yet._';
  const text = readFileSync(TEMPLATE, 'utf8').replace(/\{\{([\w:-]+)\}\}/g, (_, name: string) =>
    name.startsWith('chart:') ? (slots[name] ?? '') : (slots[name] ?? NOT_MEASURED),
  );
  writeFileSync(file, text);
}

type Row<T> = [header: string, cell: (row: T) => string | number];
/** A table from rows and one `[header, cell]` per column; nothing when there are no rows. */
function columns<T>(rows: T[], spec: Row<T>[]): string | undefined {
  return rows.length
    ? table(
        spec.map(([header]) => header),
        rows.map((r) => spec.map(([, cell]) => cell(r))),
      )
    : undefined;
}
const joined = (...blocks: (string | undefined)[]) => blocks.filter(Boolean).join('\n\n') || undefined;

/** Every slot of the template, from the run; a slot left undefined reads "not measured in this run". */
function fill(run: RunResults, resultsPath: string): Record<string, string | undefined> {
  const f = new RunFigures(run);
  const { meta } = run;
  const s = meta.settings;
  const ofCeiling = (perSecond: number) => pct(perSecond / f.ceiling);
  const example = run.segments[0]?.measured.autocannon.flags ?? run.ceiling[0]?.measured.autocannon.flags;
  const clusterCeiling = run.ceiling.find((c) => c.instances > 1);
  const clusterRows = run.cluster.flatMap((c) => [c, ...[f.at('real', c.segments)].filter((x) => x !== undefined)]);
  const perOrder = (run.perOrder ?? []).filter((c) => c.serverCost);
  const lockFree = [f.singleLock('real'), f.headline('real')].filter((c): c is SalesCase => c !== undefined);
  const latency = <T>(round: (r: T) => RoundResult): Row<T>[] => [
    ['p50 ms', (r) => ms(round(r).latencyMs.p50)],
    ['p99 ms', (r) => ms(round(r).latencyMs.p99)],
  ];
  return {
    date: meta.startedAt.slice(0, 10),
    commit: meta.gitCommit,
    command: meta.command,
    mode: meta.mode,
    minutes: String(Math.round((Date.parse(meta.finishedAt) - Date.parse(meta.startedAt)) / 60000)),
    resultsName: path.basename(resultsPath),
    resultsPath,
    machineTable: machineTable(run),
    exampleFlags: example
      ? `Exact autocannon flags of a measured round (the SKU and request count change per case):\n\`\`\`\n${example}\n\`\`\``
      : '',
    ceiling: int(f.ceiling),
    ceilingDrift: num(f.ceilingDrift),
    connections: String(s.connections),
    spreadSkus: String(s.spreadSkus ?? 400),
    mixedSpread: pct(1 - (s.mixedHotShare ?? 0.2)),
    disturbedCores: num(s.disturbedCores),
    businessStepMs: String(s.businessStepMs),
    clusterInstances: String(s.clusterInstances),
    memoryConnections: String(s.memoryConnections),
    headlineSegments: String(HEADLINE_SEGMENTS),
    growthRequests: int(s.growthRequests),
    growthConnections: String(s.growthConnections),
    dashboardWatchers: String(s.dashboardWatchers ?? 20),
    cpuCount: String(meta.cpus.count),
    targetsTable: table(
      ['Target', 'Measured', 'Result'],
      evaluateTargets(run).map((t) => [t.target, t.measured, mark(t.met)]),
      ['l', 'l', 'l'],
    ),
    headlineTable: columns(headlineRows(run, f), [
      ['Case', (r) => r.label],
      ['Answers/s', (r) => int(r.perSecond)],
      ['× the alternative (same traffic)', (r) => (r.sale ? times(f.overAlternative(r.sale)) : '–')],
      ['% of bare echo', (r) => pct(r.perSecond / f.bareEcho)],
      ['% of ceiling', (r) => ofCeiling(r.perSecond)],
      ...latency((r: HeadlineRow) => r.round),
      ['Statuses', (r) => statuses(r.round.statusCounts)],
      ['Other processes', (r) => disturbance(r.cpu, s.disturbedCores)],
    ]),
    ceilingTable: columns<CeilingCase>(
      [...run.ceiling, ...(run.bareEcho ?? [])],
      [
        ['Case', (c) => c.label],
        ['Answers/s', (c) => int(c.perSecond)],
        ['p50 ms', (c) => ms(c.measured.latencyMs.p50)],
        ['p97.5 ms', (c) => ms(c.measured.latencyMs.p97_5)],
        ['p99 ms', (c) => ms(c.measured.latencyMs.p99)],
        ['max ms', (c) => ms(c.measured.latencyMs.max)],
        ['Requests', (c) => int(c.measured.responses)],
        ['Statuses', (c) => statuses(c.measured.statusCounts)],
      ],
    ),
    realTables: joined(salesTable(f.allOf('real'), f, ofCeiling), lockTable(f.allOf('real'))),
    stepTables: joined(salesTable(f.allOf('business-step'), f, ofCeiling), lockTable(f.allOf('business-step'))),
    clusterCeiling: clusterCeiling
      ? `HTTP ceiling through the cluster: ${int(clusterCeiling.perSecond)}/s (single instance: ${int(f.ceiling)}/s).`
      : '',
    clusterTables: joined(salesTable(clusterRows, f, ofCeiling, true), lockTable(clusterRows, true)),
    oversellTable: columns(run.oversell, [
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
        (c) =>
          expectedSafe(c)
            ? c.books.ok
              ? 'balanced'
              : 'FAILED'
            : c.books.oversold > 0
              ? 'oversold, as expected without a shared lock'
              : 'no oversell this time',
      ],
    ]),
    soldOutTable: columns(run.soldOut, [
      ['Case', (c) => c.label],
      ['409/s', (c) => int(c.refusalsPerSecond)],
      ['% of ceiling', (c) => ofCeiling(c.refusalsPerSecond)],
      ...latency((c: (typeof run.soldOut)[number]) => c.measured),
      ['max ms', (c) => ms(c.measured.latencyMs.max)],
      ['Lock attempts / request', (c) => num(c.lockAttemptsPerRequest ?? NaN, 3)],
      ['Statuses', (c) => statuses(c.measured.statusCounts)],
      [
        'Restock: next order',
        (c) => `+${c.restock.quantity} → ${c.restock.firstOrderStatus} in ${ms(c.restock.firstOrderMs)} ms`,
      ],
    ]),
    lifecycleTable: columns(
      (run.lifecycle ?? []).flatMap((c) => [
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
        ['vs placing directly', (r) => `×${num(r.ratio, 2)}`],
        ['Requests/s', (r) => int(Object.values(r.round.ratePerSecond).reduce((a, b) => a + b, 0))],
        ...latency((r: { round: RoundResult }) => r.round),
        ['Statuses', (r) => statuses(r.round.statusCounts)],
      ],
    ),
    ...perOrderTables(perOrder),
    lockFreeTable: run.lockFree.length
      ? salesTable([...lockFree, ...run.alternative, ...run.lockFree], f, ofCeiling)
      : undefined,
    memoryTable: columns(run.memory, [
      ['Case', (c) => c.label],
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      ['p99 ms', (c) => ms(c.measured.latencyMs.p99)],
      ['max ms', (c) => ms(c.measured.latencyMs.max)],
      ['Statuses', (c) => statuses(c.measured.statusCounts)],
      ['RSS max in round', (c) => mib(c.memory?.maxRssBytes ?? NaN)],
      ['Peak RSS', (c) => mib(c.memory?.peakRssBytes ?? NaN)],
    ]),
    growthTable: columns(run.growth, [
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
    dashboardTable: columns(
      (run.dashboard ?? []).flatMap((c) => c.rounds.map((r) => ({ ...r, events: c.minEventsPerWatcher }))),
      [
        ['Round', (r) => r.label],
        ['Orders/s', (r) => int(r.round.ratePerSecond[201] ?? 0)],
        ...latency((r: { round: RoundResult }) => r.round),
        ['Statuses', (r) => statuses(r.round.statusCounts)],
        ['Stream chunks, least served watcher', (r) => (r.label.includes('watching') ? int(r.events) : '–')],
      ],
    ),
    cpuTable: columns(cpuCases(run, f), [
      ['Case', (r) => r.label],
      ['Answers/s', (r) => int(r.perSecond)],
      ['Machine busy', (r) => pct(r.cpu.machineBusy)],
      ...(['service', 'postgres', 'redis', 'load generator', 'others'] as const).map((group): Row<CpuRow> => [
        group === 'others' ? 'Other processes' : capitalise(group),
        (r) => num(r.cpu.cores[group]),
      ]),
      ...(['service', 'postgres', 'redis'] as const).map((group): Row<CpuRow> => [
        `${capitalise(group)} ms / answer`,
        (r) => (r.perSecond > 0 ? ms((r.cpu.cores[group] / r.perSecond) * 1000) : '–'),
      ]),
      ['Waited for quiet', (r) => (r.cpu.waitedForQuietSeconds ? `${r.cpu.waitedForQuietSeconds.toFixed(0)} s` : '–')],
      ['Disturbed', (r) => (r.cpu.cores.others > s.disturbedCores ? '**disturbed**' : 'no')],
    ]),
    skipped: run.skipped.length
      ? run.skipped.map((x) => `- ${x.scenario}: ${x.reason}`).join('\n')
      : 'Every scenario selected ran.',
    incidents: run.incidents.length ? run.incidents.map((x) => `- ${x}`).join('\n') : 'None in this run.',
  };
}

const capitalise = (word: string) => word[0]!.toUpperCase() + word.slice(1);

function machineTable(run: RunResults): string {
  const { meta } = run;
  const s = meta.settings;
  return table(
    ['', ''],
    [
      ['CPU', `${meta.cpus.count} × ${meta.cpus.model}`],
      ['Memory', `${(meta.memoryBytes / 2 ** 30).toFixed(1)} GiB`],
      ['OS', meta.os],
      ['Node', meta.node],
      ['Date', `${meta.startedAt} – ${meta.finishedAt}`],
      ['Target', meta.target],
      ['Redis / Postgres', meta.backing],
      ['Load generator', 'autocannon (programmatic API) in the same process as the runner, on the same machine'],
      [
        'Connections',
        `${s.connections} (memory case: ${s.memoryConnections}), pipelining 1, timeout ${s.timeoutSeconds} s`,
      ],
      [
        'Rounds',
        `warm-up ${s.warmupSeconds} s on its own SKU (\`-d ${s.warmupSeconds}\`), then a measured round of a fixed number of requests (\`-a <requests>\`) sized to last about ${s.measureSeconds} s at the warm-up rate`,
      ],
      [
        'Orders',
        `\`POST /orders {"sku": <fresh SKU>, "quantity": ${s.quantity}}\`; stock sized to 4× what the round can sell, so it never runs out while measuring`,
      ],
      [
        'Business step',
        `${s.businessStepMs} ms (\`CRITICAL_SECTION_DELAY_MS\`) per order, held inside the segment lock, second profile only (a batch runs its orders' steps side by side)`,
      ],
      [
        'Combining',
        'on (the default, `COMBINE_MAX_BATCH=64`) unless a row says *combining off* (`COMBINE_MAX_BATCH=1`)',
      ],
      [
        'Shared machine',
        (s.quietCores > 0
          ? `before each case the run waited (at most ${s.quietMaxWaitSeconds} s) until other processes used ≤ ${s.quietCores} cores`
          : 'no waiting for other processes') +
          `; what they used during each round is in “Where the CPU went”, where rounds over ${num(s.disturbedCores)} cores are marked disturbed`,
      ],
    ],
    ['l', 'l'],
  );
}

type CpuRow = { label: string; perSecond: number; cpu: CpuUsage };

function cpuCases(run: RunResults, f: RunFigures): CpuRow[] {
  const sales = [
    ...f.allOf('real'),
    ...f.allOf('business-step'),
    ...run.alternative,
    ...(run.spread ?? []),
    ...run.cluster,
    ...run.lockFree,
    ...(run.perOrder ?? []),
    ...run.memory,
  ];
  return [
    ...[...run.ceiling, ...(run.bareEcho ?? [])].map((c) => ({ label: c.label, perSecond: c.perSecond, cpu: c.cpu })),
    ...sales.map((c) => ({ label: c.label, perSecond: c.ordersPerSecond, cpu: c.cpu })),
    ...run.soldOut.map((c) => ({ label: c.label, perSecond: c.refusalsPerSecond, cpu: c.cpu })),
  ].filter((r): r is CpuRow => r.cpu !== null);
}

/**
 * What an order costs each server, counted by the servers: the same cases on one Redis and on a Redis Cluster,
 * with the Redis load per node, so the spread over the shards shows.
 */
function perOrderTables(cases: SalesCase[]): Record<string, string | undefined> {
  const cost = (c: SalesCase) => c.serverCost!;
  const cpuMs = (c: SalesCase, cores: number) => (c.ordersPerSecond > 0 ? (cores / c.ordersPerSecond) * 1000 : NaN);
  const pg = (c: SalesCase) => cost(c).postgres;
  const nodes = cases.flatMap((c) => cost(c).redis.nodes.map((n) => ({ c, n })));
  const listed = cases.filter((c) => c.redis === cases[0]?.redis && pg(c));
  return {
    perOrderTable: columns(cases, [
      ['Case', (c) => c.label],
      ['Orders/s', (c) => int(c.ordersPerSecond)],
      [
        'Orders / lock hold',
        (c) => num(c.lock?.acquisitionsPerSecond ? c.ordersPerSecond / c.lock.acquisitionsPerSecond : NaN, 1),
      ],
      ['Service CPU ms', (c) => ms(cpuMs(c, c.cpu?.cores.service ?? NaN))],
      ['Postgres CPU ms', (c) => ms(cpuMs(c, c.cpu?.cores.postgres ?? NaN))],
      ['Postgres statements', (c) => num(pg(c)?.statementsPerOrder ?? NaN)],
      ['Postgres exec ms', (c) => num(pg(c)?.execMsPerOrder ?? NaN, 3)],
      ['Redis round trips', (c) => num(cost(c).redis.scriptCallsPerOrder)],
      ['Redis commands on primaries', (c) => num(cost(c).redis.commandsOnPrimariesPerOrder)],
      ['Redis CPU ms, all nodes', (c) => num(cost(c).redis.cpuMsPerOrder, 3)],
      ['Redis CPU ms, busiest node', (c) => num(Math.max(...cost(c).redis.nodes.map((n) => n.cpuMsPerOrder)), 3)],
    ]),
    perOrderNodes: columns(nodes, [
      ['Case', ({ c }) => c.label],
      ['Node', ({ n }) => n.address],
      ['Role', ({ n }) => n.role],
      ['Commands / order', ({ n }) => num(n.commandsPerOrder)],
      ['CPU ms / order', ({ n }) => num(n.cpuMsPerOrder, 3)],
      ['Share of the Redis CPU', ({ c, n }) => pct(n.cpuMsPerOrder / cost(c).redis.cpuMsPerOrder)],
    ]),
    perOrderCommands: columns(cases, [
      ['Case', (c) => c.label],
      [
        'Commands / order',
        (c) =>
          Object.entries(cost(c).redis.byCommand)
            .map(([name, n]) => `${name} ${num(n, 3)}`)
            .join(', '),
      ],
    ]),
    perOrderStatements: columns(
      listed.flatMap((c) => pg(c)!.top.map((st) => ({ c, st }))),
      [
        ['Case', ({ c }) => c.label],
        ['Statement', ({ st }) => `\`${st.query}\``],
        ['Calls / order', ({ st }) => num(st.perOrder, 3)],
        ['Mean exec ms', ({ st }) => num(st.meanMs, 3)],
      ],
    ),
  };
}

interface HeadlineRow {
  label: string;
  perSecond: number;
  round: RoundResult;
  cpu: CpuUsage | null;
  /** Orders (not echoes or refusals): comparable with the alternative's on the same traffic. */
  sale?: SalesCase;
}

/**
 * The headline comparison: the bare echo, the ceiling, the alternative (hot, spread, mixed), the product with
 * combining off and on, on spread and mixed traffic, sold-out.
 */
function headlineRows(run: RunResults, f: RunFigures): HeadlineRow[] {
  const sale = (c: SalesCase | undefined): HeadlineRow[] =>
    c ? [{ label: c.label, perSecond: c.ordersPerSecond, round: c.measured, cpu: c.cpu, sale: c }] : [];
  const echo = (c: CeilingCase): HeadlineRow => ({
    label: c.label,
    perSecond: c.perSecond,
    round: c.measured,
    cpu: c.cpu,
  });
  const n = HEADLINE_SEGMENTS;
  return [
    ...(run.bareEcho ?? []).map(echo),
    ...f.ceilings.map(echo),
    ...run.alternative.flatMap((c) => sale(c)),
    ...[1, n].flatMap((segments) => [false, true].flatMap((on) => sale(f.variant('real', segments, on)))),
    ...sale(f.traffic('spread')),
    ...sale(f.traffic('mixed')),
    ...run.soldOut.map((c) => ({
      label: `${c.label} (409s)`,
      perSecond: c.refusalsPerSecond,
      round: c.measured,
      cpu: c.cpu,
    })),
    ...[1, n].flatMap((segments) => [false, true].flatMap((on) => sale(f.variant('business-step', segments, on)))),
  ];
}

/** Other processes' CPU during a round, marked when over the bound. */
function disturbance(cpu: CpuUsage | null, bound: number): string {
  if (!cpu) return '–';
  const cores = `${num(cpu.cores.others)} cores`;
  return cpu.cores.others > bound ? `**${cores}: disturbed**` : cores;
}

function salesTable(cases: SalesCase[], f: RunFigures, ofCeiling: (n: number) => string, showInstances = false) {
  return columns(cases, [
    ['Case', (c) => c.label],
    ...(showInstances ? [['Instances', (c) => c.instances] as Row<SalesCase>] : []),
    ['Orders/s', (c) => int(c.ordersPerSecond)],
    // Only the product's own order flow has a single-lock case to compare with (the alternative has no lock).
    ['× single lock', (c) => (c.lock ? times(f.speedup(c)) : '–')],
    ['% of ceiling', (c) => ofCeiling(c.ordersPerSecond)],
    ['p50 ms', (c) => ms(c.measured.latencyMs.p50)],
    ['p97.5 ms', (c) => ms(c.measured.latencyMs.p97_5)],
    ['p99 ms', (c) => ms(c.measured.latencyMs.p99)],
    ['max ms', (c) => ms(c.measured.latencyMs.max)],
    ['Requests', (c) => int(c.measured.responses)],
    ['Statuses', (c) => statuses(c.measured.statusCounts)],
    [
      'Books',
      (c) =>
        c.books.ok && c.warmupBooks.ok
          ? 'balanced'
          : `FAILED: ${[...c.books.checks, ...c.warmupBooks.checks]
              .filter((k) => !k.ok)
              .map((k) => k.name)
              .join('; ')}`,
    ],
  ]);
}

function lockTable(cases: SalesCase[], showInstances = false) {
  return columns(
    cases.filter((c) => c.lock),
    [
      ['Case', (c) => c.label],
      ...(showInstances ? [['Instances', (c) => c.instances] as Row<SalesCase>] : []),
      ['Lock attempts / order', (c) => num(c.lock!.lockAttemptsPerOrder)],
      ['Busy / order', (c) => num(c.lock!.busyPerOrder)],
      ['Waits / order', (c) => num(c.lock!.waitsPerOrder)],
      [
        'Segments tried p99',
        (c) => (Number.isFinite(c.lock!.segmentVisitsP99) ? `≤ ${c.lock!.segmentVisitsP99}` : '> 256'),
      ],
      ['Mean wait ms', (c) => ms(c.lock!.meanLockWaitMs)],
      ['Wait p99 ≤ ms', (c) => (Number.isFinite(c.lock!.lockWaitP99Ms) ? ms(c.lock!.lockWaitP99Ms) : '> 5,000')],
      ['Mean hold ms', (c) => ms(c.lock!.meanHoldMs)],
      ['Utilisation', (c) => num(c.lock!.lockUtilisation)],
      ['Fenced out', (c) => int(c.lock!.fencedOut)],
      ['Loop lag p99 ms', (c) => (c.lock!.eventLoopLagP99Ms === undefined ? '–' : ms(c.lock!.eventLoopLagP99Ms))],
    ],
  );
}
