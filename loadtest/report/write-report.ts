import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Handlebars from 'handlebars';
import type { RunResults } from '../run-results.js';
import { HEADLINE_SEGMENTS } from '../scenarios/plan.js';
import type { SalesCase } from '../scenarios/sales.js';
import { expectedSafe, formats, msPerAnswer, oversellName, runFigures, type RunFigures } from './figures.js';
import { JUDGED_WHEN_QUICK, judgeTargets } from './targets.js';

// Beside this file in the sources; compiled, this file is in dist/ and the template is not.
const TEMPLATE = new URL(
  `${import.meta.url.includes('/dist/') ? '../../../loadtest/report/' : './'}benchmarks.template.md`,
  import.meta.url,
);
const NOT_MEASURED = '_Not measured in this run._';
/** A row of the template's Targets table, by the target it judges; and such a row rendered: wording, figure, result. */
const TARGET_ROW = /^\| .* \| \{\{([\w:.-]+)\.result\}\} \|$/;
const JUDGED_ROW = /^\| (.*?) \| (.*) \| \*\*(met|not met)\*\* \|$/gm;

// The template's helpers: number formats, a ratio, CPU ms per answer; a table without rows says it was not measured.
const handlebars = Handlebars.create();
const { int, ms, num, pct } = formats;
const over = (part: number, whole: number) => part / whole;
for (const [name, format] of Object.entries({ ...formats, over, cpuMs: msPerAnswer }))
  handlebars.registerHelper(name, (...args: unknown[]) =>
    (format as (...a: unknown[]) => string)(...args.slice(0, -1)),
  );
handlebars.registerHelper({
  or: (value: unknown, fallback: unknown) => value || fallback,
  statuses: (counts: Record<string, number>) =>
    Object.entries(counts)
      .map(([code, n]) => `${code}: ${int(n)}`)
      .join(', '),
  list: (format: keyof typeof formats, values?: number[]) => values?.map((v) => formats[format](v)).join(', ') ?? '–',
  cell: (text: string) => text.replace(/\|/g, '\\|'),
  locked: (cases: SalesCase[]) => cases.filter((c) => c.lock),
  table: (rows: unknown[], options: Handlebars.HelperOptions) =>
    rows.length ? options.fn(rows) : `${(options.hash as { empty?: string }).empty ?? NOT_MEASURED}\n`,
  // A slot the run did not fill.
  helperMissing: (...args: unknown[]) => (args.length === 1 ? NOT_MEASURED : undefined),
});

/**
 * The report of a run: the template filled with its figures and tables, and the Targets table's rows of targets the
 * run did not measure left out. `notes`: what someone wrote about the run.
 */
export function renderReport(run: RunResults, resultsPath: string, notes?: string) {
  const f = runFigures(run);
  const quick = run.meta.mode === 'quick';
  const targets = judgeTargets(f);
  const data: Record<string, unknown> = { ...facts(f, resultsPath), rows: tableRows(f), quick, notes };
  for (const [name, target] of Object.entries(targets)) {
    const judged = !quick || JUDGED_WHEN_QUICK.has(name);
    const result = !judged ? 'not judged in a quick run' : target.met ? '**met**' : '**not met**';
    data[name] = { ...target, result };
  }
  const kept = readFileSync(TEMPLATE, 'utf8')
    .split('\n')
    .filter((line) => !TARGET_ROW.test(line) || targets[TARGET_ROW.exec(line)![1]!]);
  const template = handlebars.compile(kept.join('\n'), { noEscape: true });
  // The verdict counts the Targets table's judged rows as the template words them: a first rendering finds them.
  const rows = [...template(data).matchAll(JUDGED_ROW)];
  const notMet = rows.filter(([, , , result]) => result === 'not met');
  data.judgedCount = String(rows.length);
  data.metCount = String(rows.length - notMet.length);
  data.notMet = notMet.map(([, wording, figure]) => `- ${wording}: ${figure}`).join('\n');
  // A slot that filled a line of its own with nothing leaves no blank line behind.
  return template(data).replace(/\n{3,}/g, '\n\n');
}

/**
 * Writes the report; answers the report's headline and verdict, for the console. What someone wrote
 * about the run beside its results (`<results>.notes.md`) goes into its analysis.
 */
export function writeReport(run: RunResults, file: string, resultsFile: string): string[] {
  const dir = path.dirname(file);
  const notesFile = resultsFile.replace(/\.json$/, '.notes.md');
  const notes = existsSync(notesFile) ? readFileSync(notesFile, 'utf8').trim() : undefined;
  const text = renderReport(run, path.relative(dir, resultsFile), notes);
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
function facts({ run, ceiling }: RunFigures, resultsPath: string) {
  const { meta } = run;
  const { settings, startedAt, finishedAt } = meta;
  const clusterCeiling = run.ceiling.find((c) => c.instances > 1);
  // Whole numbers as the prose writes them (10,000).
  const asWritten = (v: unknown) => (Number.isInteger(v) ? int(v as number) : v);
  return {
    ...Object.fromEntries(Object.entries({ ...meta, ...settings }).map(([name, v]) => [name, asWritten(v)])),
    date: startedAt.slice(0, 10),
    minutes: String(Math.round((Date.parse(finishedAt) - Date.parse(startedAt)) / 60000)),
    resultsName: path.basename(resultsPath),
    resultsPath,
    machineMemory: `${(meta.memoryBytes / 2 ** 30).toFixed(1)} GiB`,
    mixedSpread: pct(1 - settings.mixedHotShare),
    headlineSegments: String(HEADLINE_SEGMENTS),
    httpCeiling: ceiling,
    clusterCeiling: clusterCeiling && int(clusterCeiling.perSecond),
    skipped: run.skipped.map((x) => `- ${x.scenario}: ${x.reason}`).join('\n'),
    // The fleet's most segments at its most instances and longest delay: where the lock is held across most hops.
    fleetHeadline: fleetCells(run)
      .filter((c) => c.segments > 1)
      .sort((a, b) => b.instances - a.instances || b.delayMs - a.delayMs || b.segments - a.segments)[0],
  };
}

/** The fleet's cells, each with its orders/s and p99 against the single lock at its instances and delay. */
function fleetCells(run: RunResults) {
  return run.fleet.map((c) => {
    const base = run.fleet.find((x) => x.instances === c.instances && x.delayMs === c.delayMs && x.segments === 1);
    const p99 = c.measured.latencyMs.p99;
    return {
      ...c,
      delayMs: c.delayMs ?? 0,
      ratio: c.perSecond / (base?.perSecond ?? NaN),
      p99Ratio: p99 / (base?.measured.latencyMs.p99 ?? NaN),
    };
  });
}

/** Every table's rows, with what each row is compared with; the template lays the tables out. */
function tableRows(f: RunFigures) {
  const { run } = f;
  const failed = (c: SalesCase) => [...c.books.checks, ...c.warmupBooks.checks].filter((k) => !k.ok).map((k) => k.name);
  const bounded = (n: number, beyond: string, format: (n: number) => string) =>
    Number.isFinite(n) ? format(n) : beyond;
  const sales = (cases: SalesCase[]) =>
    cases.map((c) => ({
      ...c,
      // Only the product's own order flow has a single-lock case to compare with (the alternative has no lock).
      speedup: c.lock ? f.speedup(c) : NaN,
      failed: failed(c).join('; '),
      visits: c.lock && bounded(c.lock.segmentVisitsP99, '> 256', (n) => `≤ ${n}`),
      waitP99: c.lock && bounded(c.lock.lockWaitP99Ms, '> 5,000', ms),
    }));
  /** Orders/s against the case of the same table that `isBase` picks for each. */
  const against = <T extends SalesCase>(cases: T[], isBase: (x: T, c: T) => boolean) =>
    cases.map((c) => ({ ...c, ratio: c.perSecond / (cases.find((x) => isBase(x, c))?.perSecond ?? NaN) }));
  // A lock cell is compared with the better peer library of its cell; comparing backends, with the Redis backend.
  const lockBaseline = ({ keys, holdMs }: RunResults['locks'][number]) =>
    f.fastest(f.lockCell(keys, holdMs), false) ?? f.lockCell(keys, holdMs).find((x) => x.contender === 'backend:redis');
  return {
    echoes: [...run.ceiling, ...run.bareEcho],
    real: sales(f.allOf('real')),
    step: sales(f.allOf('business-step')),
    cluster: sales(run.cluster.flatMap((c) => [c, f.at('real', c.segments) ?? []].flat())),
    fleet: fleetCells(run).map((c) => ({ ...sales([c])[0]!, ...c })),
    oversell: run.oversell.map((c) => ({
      ...c,
      name: oversellName(c).replace(/ · \d+ instances?$/, ''),
      safe: expectedSafe(c),
      oversold: c.books.oversold > 0,
    })),
    soldOut: run.soldOut,
    lifecycle: run.lifecycle.flatMap(({ direct, reserveThenConfirm: reserved }) => [
      { ...direct, ratio: 1 },
      { ...reserved, ratio: reserved.perSecond / direct.perSecond },
    ]),
    expiry: run.expiry,
    // What an order costs each server, counted by the servers.
    costed: run.perOrder
      .filter((c) => c.serverCost)
      .map((c) => ({
        ...c,
        busiest: Math.max(...c.serverCost!.redis.nodes.map((n) => n.cpuMsPerOrder)),
        byCommand: Object.entries(c.serverCost!.redis.byCommand)
          .map(([name, n]) => `${name} ${num(n, 3)}`)
          .join(', '),
      })),
    lockFree: run.lockFree.length ? sales([...f.product, ...run.alternative, ...run.lockFree]) : [],
    memory: run.memory,
    growth: run.growth,
    dashboard: run.dashboard.flatMap((c) =>
      c.rounds.map((r) => ({ ...r, events: r.label.includes('watching') ? int(c.minEventsPerWatcher) : '–' })),
    ),
    auth: against(run.auth, (x, c) => x.auth === 'none' && x.round === c.round),
    events: against(run.events, (x, c) => x.events === 'off' && x.round === c.round),
    retention: run.eventRetention.flatMap((c) =>
      c.samples.map((x) => ({ ...x, expected: c.retentionSeconds * x.ordersPerSecond })),
    ),
    locks: run.locks.map((r) => ({ ...r, ratio: r.sectionsPerSecond / (lockBaseline(r)?.sectionsPerSecond ?? NaN) })),
    lockOrderFlow: against(
      run.lockOrderFlow.map((c) => ({ ...c, notPlaced: c.measured.responses - (c.measured.statusCounts[201] ?? 0) })),
      (x, c) => x.lockBackend === 'redis' && x.holdMs === c.holdMs,
    ),
    // Where each round's CPU went, by process group.
    cpu: [
      ...[run.ceiling, run.bareEcho, f.allOf('real'), f.allOf('business-step')],
      ...[run.alternative, run.spread, run.cluster, run.lockFree, run.perOrder, run.memory, run.auth, run.soldOut],
      run.fleet,
    ]
      .flat()
      .filter((r) => r.cpu),
  };
}
