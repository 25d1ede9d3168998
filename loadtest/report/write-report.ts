import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { RunResults } from '../run-results.js';
import type { RoundResult } from '../runner/round.js';
import { HEADLINE_SEGMENTS } from '../scenarios/plan.js';
import type { SalesCase } from '../scenarios/sales.js';
import { renderCharts } from './charts.js';
import { type Answers, type Column, expectedSafe, int, mib, ms, num, pct, type RunFigures } from './figures.js';
import { msPerAnswer, oversellName, runFigures, table, times } from './figures.js';
import { JUDGED_WHEN_QUICK, judgeTargets } from './targets.js';

// Beside this file in the sources; compiled, this file is in dist/ and the template is not.
const TEMPLATE = new URL(
  `${import.meta.url.includes('/dist/') ? '../../../loadtest/report/' : './'}benchmarks.template.md`,
  import.meta.url,
);
type Slots = Record<string, string | undefined>;
/** A row of the template's Targets table: its wording, its figure, the target it judges. */
const TARGET_ROW = /^\| (.*) \| (.*) \| \{\{([\w:.-]+)\.result\}\} \|$/;

/**
 * The report of a run: the template's `{{name|fallback}}` slots filled with its figures, its lines marked
 * `<!-- quick -->` or `<!-- full -->` kept for that kind of run only, and the Targets table's rows of targets the run
 * did not measure left out. `more`: the charts, when they were drawn, and the notes someone wrote about the run.
 */
export function renderReport(run: RunResults, resultsPath: string, more: Slots = {}): string {
  const f = runFigures(run);
  const quick = run.meta.mode === 'quick';
  const targets = judgeTargets(f);
  const judged = (name: string) => targets[name] && (!quick || JUDGED_WHEN_QUICK.has(name));
  const slots: Slots = { ...facts(f, resultsPath), ...tables(f), ...more };
  for (const [name, target] of Object.entries(targets)) {
    for (const [key, value] of Object.entries(target)) slots[`${name}.${key}`] = String(value);
    slots[`${name}.result`] = !judged(name) ? 'not judged in a quick run' : target.met ? '**met**' : '**not met**';
  }
  const fill = (text: string) =>
    text.replace(
      /\{\{([\w:.-]+)(?:\|([^}]*))?\}\}/g,
      (_, name: string, fallback?: string) =>
        slots[name] || (fallback ?? (name.startsWith('chart:') ? '' : '_Not measured in this run._')),
    );
  const kept = readFileSync(TEMPLATE, 'utf8')
    .split('\n')
    .filter((line) => !line.startsWith(`<!-- ${quick ? 'full' : 'quick'} -->`))
    .map((line) => line.replace(/^<!-- (quick|full) -->/, ''))
    .filter((line) => !TARGET_ROW.test(line) || targets[TARGET_ROW.exec(line)![3]!]);
  const rows = kept.flatMap((line) => {
    const [, wording, figure, name] = TARGET_ROW.exec(line) ?? [];
    return name && judged(name) ? [{ wording: fill(wording!), figure: fill(figure!), met: targets[name]!.met }] : [];
  });
  const notMet = rows.filter((row) => !row.met);
  slots.judgedCount = String(rows.length);
  slots.metCount = String(rows.length - notMet.length);
  slots.notMet = notMet.map((row) => `- ${row.wording}: ${row.figure}`).join('\n');
  // A slot that filled a line of its own with nothing leaves no blank line behind.
  return fill(kept.join('\n')).replace(/\n{3,}/g, '\n\n');
}

/**
 * Writes the report and its charts; answers the report's headline and verdict, for the console. What someone wrote
 * about the run beside its results (`<results>.notes.md`) goes into its analysis.
 */
export async function writeReport(run: RunResults, file: string, resultsFile: string): Promise<string[]> {
  const dir = path.dirname(file);
  const notesFile = resultsFile.replace(/\.json$/, '.notes.md');
  const chartDir = path.join(dir, file.endsWith('benchmarks.md') ? 'charts' : `${path.basename(file, '.md')}-charts`);
  mkdirSync(chartDir, { recursive: true });
  const more: Slots = { notes: existsSync(notesFile) ? readFileSync(notesFile, 'utf8').trim() : undefined };
  for (const c of await renderCharts(runFigures(run), chartDir))
    more[`chart:${c.name}`] = `![${c.title}](${path.relative(dir, c.file)})`;
  const text = renderReport(run, path.relative(dir, resultsFile), more);
  writeFileSync(file, text);
  return verdictOf(text);
}

/** The report's headline and verdict as plain lines: what the console ends with. */
export function verdictOf(report: string): string[] {
  const from = report.indexOf('\n## Headline');
  const to = report.indexOf('\n## ', report.indexOf('\n## Verdict') + 1);
  return report
    .slice(from + 1, to)
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => line.replace(/\*\*/g, '').replace(/^## /, '').replace(/`/g, ''));
}

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
    resultsName: path.basename(resultsPath),
    resultsPath,
    cpu: `${meta.cpus.count} × ${meta.cpus.model}`,
    cpuCount: String(meta.cpus.count),
    memory: `${(meta.memoryBytes / 2 ** 30).toFixed(1)} GiB`,
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

// Columns most tables share, of a case's measured round.
type Measured = { measured: RoundResult };
const latency = (...keys: (keyof RoundResult['latencyMs'])[]): Column<Measured>[] =>
  keys.map((key) => [`${key.replace('_', '.')} ms`, (r) => ms(r.measured.latencyMs[key])]);
const status = ([code, n]: [string, number]) => `${code}: ${int(n)}`;
const statuses = (counts: Record<string, number>) => Object.entries(counts).map(status).join(', ');
const statusColumn: Column<Measured> = ['Statuses', (r) => statuses(r.measured.statusCounts)];
const latencyAndStatus = (...keys: Parameters<typeof latency>) => [...latency(...keys), statusColumn];
const requests: Column<Measured> = ['Requests', (r) => int(r.measured.responses)];
/** A measured round in full: its latency, requests and statuses. */
const fullRound = [...latency('p50', 'p97_5', 'p99', 'max'), requests, statusColumn];
const label = (header = 'Case'): Column<{ label: string }> => [header, (c) => c.label];
const orders: Column<{ perSecond: number }> = ['Orders/s', (c) => int(c.perSecond)];
const optional = (n: number | undefined) => (n === undefined ? '—' : int(n));
const serviceMs = (c: Answers) => ms(msPerAnswer(c));
const seconds = (s = 0) => (s ? `${s.toFixed(0)} s` : '–');

/** Every table slot of the template. */
function tables(f: RunFigures): Slots {
  const { run } = f;
  const ofCeiling = (c: { perSecond: number }) => pct(c.perSecond / f.ceiling);
  const echoes = [...run.ceiling, ...run.bareEcho];
  const variants = (p: SalesCase['profile']) =>
    [1, HEADLINE_SEGMENTS].flatMap((n) => [false, true].flatMap((on) => f.at(p, n, on) ?? []));
  const clusterRows = run.cluster.flatMap((c) => [c, f.at('real', c.segments) ?? []].flat());
  /**
   * Orders/s against the case of the same table (and round) whose `key` is `value`, then the columns such comparisons
   * share.
   */
  const against = <K extends keyof SalesCase>(cases: SalesCase[], key: K, value: SalesCase[K], header: string) => {
    const base = (c: SalesCase) => cases.find((x) => x[key] === value && x.round === c.round)?.perSecond ?? NaN;
    const ratio: Column<SalesCase> = [header, (c) => times(c.perSecond / base(c))];
    return [orders, ratio, ...latencyAndStatus('p50', 'p99'), ['Service ms / order', serviceMs]] as Column<SalesCase>[];
  };
  // A lock cell is compared with the better peer library of its cell; comparing backends, with the Redis backend.
  const lockBaseline = ({ keys, holdMs }: RunResults['locks'][number]) =>
    f.fastest(f.lockCell(keys, holdMs), false) ?? f.lockCell(keys, holdMs).find((x) => x.contender === 'backend:redis');
  const onRedis = (c: SalesCase) => run.lockOrderFlow.find((x) => x.lockBackend === 'redis' && x.holdMs === c.holdMs);
  const oversellVerdict = ({ books, ...c }: RunResults['oversell'][number]) => {
    if (expectedSafe(c)) return books.ok ? 'balanced' : 'FAILED';
    return books.oversold > 0 ? 'oversold, as expected without a shared lock' : 'no oversell this time';
  };
  const rss = (bytes = NaN) => (bytes > 0 ? `${mib(bytes)} MiB` : '–');
  const lifecycle = run.lifecycle.flatMap(({ direct, reserveThenConfirm: reserved }) => [
    { ...direct, ratio: 1 },
    { ...reserved, ratio: reserved.perSecond / direct.perSecond },
  ]);
  const dashboardRounds = run.dashboard.flatMap((c) =>
    c.rounds.map((r) => ({ ...r, events: r.label.includes('watching') ? int(c.minEventsPerWatcher) : '–' })),
  );
  const lock = (c: SalesCase) => c.lock!;
  const bounded = (n: number, beyond: string, format = ms) => (Number.isFinite(n) ? format(n) : beyond);
  const lockTable = (cases: SalesCase[], ...instances: Column<SalesCase>[]) =>
    table(cases.filter(lock), [
      label(),
      ...instances,
      ['Lock attempts / order', (c) => num(lock(c).lockAttemptsPerOrder)],
      ['Busy / order', (c) => num(lock(c).busyPerOrder)],
      ['Waits / order', (c) => num(lock(c).waitsPerOrder)],
      ['Segments tried p99', (c) => bounded(lock(c).segmentVisitsP99, '> 256', (n) => `≤ ${n}`)],
      ['Mean wait ms', (c) => ms(lock(c).meanLockWaitMs)],
      ['Wait p99 ≤ ms', (c) => bounded(lock(c).lockWaitP99Ms, '> 5,000')],
      ['Mean hold ms', (c) => ms(lock(c).meanHoldMs)],
      ['Utilisation', (c) => num(lock(c).lockUtilisation)],
      ['Fenced out', (c) => int(lock(c).fencedOut)],
      ['Loop lag p99 ms', (c) => ms(lock(c).eventLoopLagP99Ms)],
    ]);
  const failed = (c: SalesCase) => [...c.books.checks, ...c.warmupBooks.checks].filter((k) => !k.ok).map((k) => k.name);
  const salesTable = (cases: SalesCase[], ...instances: Column<SalesCase>[]) =>
    table(cases, [
      label(),
      ...instances,
      orders,
      // Only the product's own order flow has a single-lock case to compare with (the alternative has no lock).
      ['× single lock', (c) => (c.lock ? times(f.speedup(c)) : '–')],
      ['% of ceiling', ofCeiling],
      ...fullRound,
      ['Books', (c) => (failed(c).length ? `FAILED: ${failed(c).join('; ')}` : 'balanced')],
    ]);
  /** A comparison's throughput table and, for the cases of the product's own order flow, its lock table. */
  const salesTables = (cases: SalesCase[], ...instances: Column<SalesCase>[]) =>
    [salesTable(cases, ...instances), lockTable(cases, ...instances)].filter(Boolean).join('\n\n') || undefined;
  const cpuGroups = ['service', 'postgres', 'redis', 'load generator', 'others'] as const;
  const group = (g: string) => (g === 'others' ? 'Other processes' : `${g[0]!.toUpperCase()}${g.slice(1)}`);
  const cpuRows: Answers[] = [
    ...echoes,
    ...[...f.allOf('real'), ...f.allOf('business-step')],
    ...[run.alternative, run.spread, run.cluster, run.lockFree, run.perOrder, run.memory, run.auth].flat(),
    ...run.soldOut,
  ].filter((r) => r.cpu);
  const retention = run.eventRetention.flatMap((c) => c.samples.map((x) => ({ ...x, keep: c.retentionSeconds })));
  // A comparison measured in several rounds shows its median round here (by the ratio of its sides), every round
  // under "Where the CPU went".
  const compared = [f.hotBeside, f.traffic('spread'), f.traffic('mixed')];
  const headline: Answers[] = [
    ...[f.echoFor(f.hotOverEcho ?? {}), ...f.ceilings],
    ...compared.map((c) => c && f.alternativeFor(c)),
    ...variants('real'),
    ...compared,
    ...f.refusals.map((c) => ({ ...c, label: `${c.label} (409s)` })),
    ...variants('business-step'),
  ].filter((c) => c !== undefined);
  // What an order costs each server, counted by the servers, with the Redis load per node.
  const redis = (c: SalesCase) => c.serverCost!.redis;
  const pg = (c: SalesCase) => c.serverCost!.postgres;
  const command = ([name, n]: [string, number]) => `${name} ${num(n, 3)}`;
  const byCommand = (c: SalesCase) => Object.entries(redis(c).byCommand).map(command).join(', ');
  const costed = run.perOrder.filter((c) => c.serverCost);
  // The statements do not depend on the Redis: those of the cases on the first one.
  const onFirstRedis = costed.filter((c) => c.redis === costed[0]?.redis);
  const statements = onFirstRedis.flatMap((c) => (pg(c)?.top ?? []).map((st) => ({ c, st })));
  const nodes = costed.flatMap((c) => redis(c).nodes.map((n) => ({ c, n })));
  return {
    headlineTable: table(headline, [
      label(),
      ['Answers/s', (r) => int(r.perSecond)],
      ['× the alternative (same traffic)', (r) => ('books' in r ? times(f.overAlternative(r as SalesCase)) : '–')],
      ['% of bare echo', (r) => pct(r.perSecond / (f.echoFor(r)?.perSecond ?? NaN))],
      ['% of ceiling', ofCeiling],
      ...latencyAndStatus('p50', 'p99'),
      ['Other processes', (r) => (r.cpu ? `${num(r.cpu.cores.others)} cores` : '–')],
    ]),
    ceilingTable: table(echoes, [label(), ['Answers/s', (c) => int(c.perSecond)], ...fullRound]),
    realTables: salesTables(f.allOf('real')),
    stepTables: salesTables(f.allOf('business-step')),
    clusterTables: salesTables(clusterRows, ['Instances', (c) => c.instances]),
    oversellTable: table(run.oversell, [
      ['Guard', (c) => oversellName(c).replace(/ · \d+ instances?$/, '')],
      ['Instances', (c) => c.instances],
      ['Stock', (c) => int(c.stock)],
      ['Requests', (c) => int(c.requests)],
      ['Answers', (c) => statuses(c.measured.statusCounts)],
      ['Units sold (ledger)', (c) => int(c.books.sold)],
      ['Left', (c) => int(c.books.available)],
      ['Oversold', (c) => `**${int(c.books.oversold)}**`],
      ['Books', oversellVerdict],
    ]),
    soldOutTable: table(run.soldOut, [
      label(),
      ['409/s', (c) => int(c.perSecond)],
      ['Echo beside /s', (c) => int(c.echoBeside.perSecond)],
      ['% of ceiling', (c) => pct(f.refusalShare(c))],
      ...latency('p50', 'p99', 'max'),
      ['Lock attempts / request', (c) => num(c.lockAttemptsPerRequest ?? NaN, 3)],
      statusColumn,
      ['Then: next order', ({ reopen: r }) => `${r.how} → ${r.firstOrderStatus} in ${ms(r.firstOrderMs)} ms`],
    ]),
    lifecycleTable: table(lifecycle, [
      label(),
      ['Confirmed orders/s', (r) => int(r.perSecond)],
      ['vs placing directly', (r) => `×${num(r.ratio)}`],
      ['Requests/s', (r) => int(Object.values(r.measured.ratePerSecond).reduce((a, b) => a + b, 0))],
      ...latencyAndStatus('p50', 'p99'),
    ]),
    perOrderTable: table(costed, [
      label(),
      orders,
      ['Orders / lock hold', (c) => num(c.perSecond / (c.lock?.acquisitionsPerSecond || NaN), 1)],
      ['Service CPU ms', serviceMs],
      ['Postgres CPU ms', (c) => ms(msPerAnswer(c, 'postgres'))],
      ['Postgres statements', (c) => num(pg(c)?.statementsPerOrder ?? NaN)],
      ['Postgres exec ms', (c) => num(pg(c)?.execMsPerOrder ?? NaN, 3)],
      ['Redis round trips', (c) => num(redis(c).scriptCallsPerOrder)],
      ['Redis commands on primaries', (c) => num(redis(c).commandsOnPrimariesPerOrder)],
      ['Redis CPU ms, all nodes', (c) => num(redis(c).cpuMsPerOrder, 3)],
      ['Redis CPU ms, busiest node', (c) => num(Math.max(...redis(c).nodes.map((n) => n.cpuMsPerOrder)), 3)],
    ]),
    perOrderNodes: table(nodes, [
      ['Case', ({ c }) => c.label],
      ['Node', ({ n }) => n.address],
      ['Role', ({ n }) => n.role],
      ['Commands / order', ({ n }) => num(n.commandsPerOrder)],
      ['CPU ms / order', ({ n }) => num(n.cpuMsPerOrder, 3)],
      ['Share of the Redis CPU', ({ c, n }) => pct(n.cpuMsPerOrder / redis(c).cpuMsPerOrder)],
    ]),
    perOrderCommands: table(costed, [label(), ['Commands / order', byCommand]]),
    perOrderStatements: table(statements, [
      ['Case', ({ c }) => c.label],
      ['Statement', ({ st }) => `\`${st.query}\``],
      ['Calls / order', ({ st }) => num(st.perOrder, 3)],
      ['Mean exec ms', ({ st }) => num(st.meanMs, 3)],
    ]),
    lockFreeTable: run.lockFree.length ? salesTable([...f.product, ...run.alternative, ...run.lockFree]) : undefined,
    memoryTable: table(run.memory, [
      label(),
      orders,
      ...latencyAndStatus('p99', 'max'),
      ['RSS max in round', (c) => rss(c.memory?.maxRssBytes)],
      ['Peak RSS', (c) => rss(c.memory?.peakRssBytes)],
    ]),
    growthTable: table(run.growth, [
      ['Ledger rows', (c) => int(c.ledgerRows)],
      ['Seeded in', (c) => seconds(c.ledgerRows && c.seedSeconds)],
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
      ['Orders/s', (r) => int(r.measured.ratePerSecond[201] ?? 0)],
      ...latencyAndStatus('p50', 'p99'),
      ['Stream chunks, least served watcher', (r) => r.events],
    ]),
    authTable: table(run.auth, [label('Credential'), ...against(run.auth, 'auth', 'none', '× no credential')]),
    eventsTable: table(run.events, [
      label('Events'),
      ...against(run.events, 'events', 'off', '× events off'),
      ['Webhook deliveries', (c) => optional(c.delivered)],
      ['Outbox rows after', (c) => optional(c.outboxAfter)],
    ]),
    retentionTable: table(retention, [
      ['Second', (x) => int(x.atSeconds)],
      ['Orders/s', (x) => int(x.ordersPerSecond)],
      ['Events kept', (x) => int(x.events)],
      ['≈ retention × rate', (x) => int(x.keep * x.ordersPerSecond)],
      ['Outbox rows', (x) => int(x.outbox)],
    ]),
    locksTable: table(run.locks, [
      ['K', (r) => r.keys],
      ['H (ms)', (r) => r.holdMs],
      ['Lock', (r) => r.contender],
      ['Sections/s', (r) => int(r.sectionsPerSecond)],
      ['× baseline', (r) => num(r.sectionsPerSecond / (lockBaseline(r)?.sectionsPerSecond ?? NaN))],
      ['Max wait ms', (r) => int(r.maxWaitMs)],
      ['p99 wait ms', (r) => int(r.p99WaitMs)],
      ['Mean hold ms', (r) => num(r.meanHoldMs)],
      ['Errors', (r) => r.errors],
    ]),
    lockOrderFlowTable: table(run.lockOrderFlow, [
      ['Backend', (c) => c.lockBackend ?? '–'],
      ['Step ms', (c) => c.holdMs ?? 0],
      orders,
      ['× redis', (c) => num(c.perSecond / (onRedis(c)?.perSecond ?? NaN))],
      ...latency('p99', 'max'),
      ['Not placed', (c) => int(c.measured.responses - (c.measured.statusCounts[201] ?? 0))],
    ]),
    // Where each round's CPU went, by process group, and what the groups spent per answer.
    cpuTable: table(cpuRows, [
      label(),
      ['Answers/s', (r) => int(r.perSecond)],
      ['Machine busy', (r) => pct(r.cpu!.machineBusy)],
      ...cpuGroups.map((g): Column<Answers> => [group(g), (r) => num(r.cpu!.cores[g])]),
      ...cpuGroups.slice(0, 3).map((g): Column<Answers> => [`${group(g)} ms / answer`, (r) => ms(msPerAnswer(r, g))]),
    ]),
  };
}
