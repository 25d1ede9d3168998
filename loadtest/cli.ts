/** `npm run loadtest [-- options]`: the results json and report; exit 1 when a case's books do not balance. */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { type BackingServices, startBackingServices } from './infra/backing-services.js';
import { expectedSafe } from './report/figures.js';
import { writeReport } from './report/write-report.js';
import { RunProgress } from './runner/round.js';
import { describeRun, type RunResults } from './run-results.js';
import { presets, RunContext, type RunSettings } from './scenarios/context.js';
import * as plan from './scenarios/plan.js';
import type { Books } from './scenarios/sales.js';

const number = (check: (n: number) => boolean, expected: string) => (value: string) => {
  if (!check(Number(value))) throw new InvalidArgumentError(`expected ${expected}`);
  return Number(value);
};
const positiveInt = number((n) => Number.isInteger(n) && n > 0, 'a positive integer');
function list<T>(parse: (part: string) => T) {
  return (value: string) => value.split(',').map((part) => parse(part.trim()));
}
const oneOf = <T extends string>(names: readonly T[]) =>
  list((part) => {
    if (!names.includes(part as T)) throw new InvalidArgumentError(`unknown '${part}'; one of ${names.join(', ')}`);
    return part as T;
  });
// Every contender and backend is in a full run: the flags choose among those.
const { lockContenders: contenders, lockBackends: backends } = presets.full;
const positive = number((n) => n > 0, 'a positive number');
const segmentList = (value: string) => [...new Set(list(positiveInt)(value))].sort((a, b) => a - b);

/** The options that change a setting of the run: flags, help, parser, and the settings they set. */
const settingOptions: [string, string, (value: string) => unknown, ...(keyof RunSettings)[]][] = [
  ['--segments <list>', 'segment counts to compare, e.g. 1,2,4,8,16,20,32', segmentList, 'segmentCounts'],
  ['-c, --connections <n>', 'concurrent connections (default 64)', positiveInt, 'connections'],
  ['--warmup <seconds>', 'warm-up round length', positive, 'warmupSeconds', 'lockWarmupSeconds'],
  ['--duration <seconds>', 'target length of a measured round', positive, 'measureSeconds', 'lockMeasureSeconds'],
  ['--comparisons <n>', 'rounds of each product-vs-yardstick comparison (default 3)', positiveInt, 'comparisonRounds'],
  ['--business-step <ms>', 'business step in the lock, second profile (default 20)', positiveInt, 'businessStepMs'],
  ['--instances <n>', 'instances behind one port in the cluster scenario (default 2)', positiveInt, 'clusterInstances'],
  ['--fleet-instances <list>', 'fleet: instance counts (default 1,2,4)', segmentList, 'fleetInstances'],
  ['--fleet-segments <list>', 'fleet: segment counts (default 1,4,20)', segmentList, 'fleetSegmentCounts'],
  ['--fleet-delays <list>', 'fleet: Redis and Postgres ms away, each way (default 0,1)', list(Number), 'fleetDelaysMs'],
  ['--workers <n>', 'lock benchmark: workers; the order flow’s connections (default 50)', positiveInt, 'lockWorkers'],
  ['--keys <list>', 'lock benchmark: numbers of keys K (default 1,20)', list(positiveInt), 'lockKeys'],
  ['--holds <list>', 'lock benchmark: hold times H in ms (default 0,20)', list(Number), 'lockHoldsMs'],
  ['--locks <list>', `lock benchmark: ${contenders.join(', ')}`, oneOf(contenders), 'lockContenders'],
  ['--backends <list>', `lock-backends, lock-order-flow: ${backends.join(', ')}`, oneOf(backends), 'lockBackends'],
  ['--lock-wait-ms <ms>', 'lock-order-flow: LOCK_WAIT_MS of the services (default 10000)', positiveInt, 'lockWaitMs'],
];

const program = new Command('loadtest')
  .description('Single lock vs segmented stock on this machine: throughput, latency, lock use, oversell demonstration.')
  .option('--quick', 'short smoke run: segment counts 1 and 20, 1 s warm-up, 1.5 s rounds')
  .option('--only <list>', `run only these: ${plan.scenarioNames.join(', ')}`, oneOf(plan.scenarioNames))
  .option('--results-dir <dir>', 'where the raw results go', 'loadtest/results')
  .option('--report <file>', 'markdown report (default: docs/benchmarks.md for a whole run, else beside results)')
  .option('--report-from <results>', 'measure nothing: write the report of an earlier run from its results json')
  .addHelpText('after', '\nThe run starts its own Redis and Postgres, or uses REDIS_URL / DATABASE_URL.');
const settingFlags = settingOptions.map(([flags, help, parse, ...names]) => {
  const option = new Option(flags, help).argParser(parse);
  program.addOption(option);
  return { key: option.attributeName(), names };
});

async function main(): Promise<void> {
  const cli = program.parse().opts();
  if (cli.reportFrom) {
    // The report of a run again, e.g. with the notes written beside its results since.
    const resultsFile = path.resolve(cli.reportFrom as string);
    // A run made before a scenario existed has no list of its cases.
    const earlier = { ...plan.emptyCases(), ...JSON.parse(readFileSync(resultsFile, 'utf8')) } as RunResults;
    const reportFile = path.resolve((cli.report as string | undefined) ?? resultsFile.replace(/\.json$/, '.md'));
    const verdict = writeReport(earlier, reportFile, resultsFile);
    return void process.stderr.write(`report: ${path.relative(process.cwd(), reportFile)}\n\n${verdict.join('\n')}\n`);
  }
  const mode = cli.quick ? 'quick' : 'full';
  const settings: Record<string, unknown> = { ...presets[mode] };
  for (const { key, names } of settingFlags)
    if (cli[key] !== undefined) for (const name of names) settings[name] = cli[key];
  const named = cli.only as plan.ScenarioName[] | undefined;
  const defaults = plan.scenarioNames.filter((name) => !plan.namedOnly.includes(name));
  const progress = new RunProgress();
  const startedAt = new Date();
  let backing: BackingServices | null = null;
  let ctx: RunContext | undefined;
  let interrupted = false;
  const stopEverything = async () => {
    await Promise.allSettled([...(ctx?.started ?? [])].map((service) => service.stop()));
    await backing?.stop();
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.once(signal, () => {
      interrupted = true;
      progress.note(`${signal}: stopping the services this run started`);
      void stopEverything().finally(() => process.exit(130));
    });
  try {
    progress.note('starting Redis and Postgres…');
    backing = await startBackingServices(process.env);
    ctx = new RunContext(settings as RunSettings, progress, backing);
    const cases = await plan.runPlan(ctx, new Set(named ?? defaults));
    const run: RunResults = { meta: describeRun(mode, startedAt, ctx), ...cases };
    await stopEverything();

    const stamp = startedAt.toISOString().replace(/[:.]/g, '-');
    const resultsFile = path.resolve(cli.resultsDir as string, `${stamp}.json`);
    mkdirSync(path.dirname(resultsFile), { recursive: true });
    writeFileSync(resultsFile, `${JSON.stringify(run, null, 2)}\n`);
    progress.note(`results: ${path.relative(process.cwd(), resultsFile)}`);
    // docs/benchmarks.md is the report of a whole run; any other run's goes beside its results.
    const whole = mode === 'full' && !named;
    const reportFile = path.resolve(
      cli.report ?? (whole ? 'docs/benchmarks.md' : resultsFile.replace(/\.json$/, '.md')),
    );
    const verdict = writeReport(run, reportFile, resultsFile);
    progress.note(`report: ${path.relative(process.cwd(), reportFile)}`);
    const failures = bookFailures(run);
    for (const failure of failures) progress.note(`INVARIANT FAILED: ${failure}`);
    // Last, on one screen: the headline and the verdict, as the report opens.
    process.stderr.write(`\n${verdict.join('\n')}\n\n`);
    process.exitCode = failures.length > 0 ? 1 : 0;
  } catch (error) {
    if (interrupted) return;
    for (const service of ctx?.started ?? []) progress.note(service.diagnostics());
    await stopEverything();
    throw error;
  }
}

/** Cases whose books do not add up, the oversell demonstration's guarded ones included. */
function bookFailures(run: RunResults): string[] {
  const failed = (label: string, books: Books) =>
    books.checks.filter((k) => !k.ok).map((k) => `${label}: ${k.name}: ${k.detail}`);
  return [
    ...plan
      .casesWithBooks(run)
      .flatMap((c) => [...failed(`${c.label} (measured)`, c.books), ...failed(`${c.label} (warm-up)`, c.warmupBooks)]),
    ...run.growth.filter((c) => !c.booksOk).map((c) => `${c.label}: the books do not add up after its rounds`),
    ...run.oversell.filter(expectedSafe).flatMap((c) => failed(c.label, c.books)),
  ];
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? (error.stack ?? error.message) : error);
  process.exit(1);
});
