/**
 * `npm run loadtest [-- options]`: single lock vs segmented stock on this machine, with the HTTP ceiling, the
 * oversell demonstration, the sold-out path and lock-free baselines. Writes loadtest/results/<timestamp>.json and
 * the markdown report with its charts.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { createDatabase, type Db } from '../src/db/database.js';
import { type BackingServices, startBackingServices } from './infra/backing-services.js';
import { LocalService, RemoteService, type ServiceTarget } from './infra/service-process.js';
import { expectedSafe } from './report/targets.js';
import { writeReport } from './report/write-report.js';
import type { RunResults, RunSettings } from './results.js';
import { RunProgress } from './runner/progress.js';
import { RunContext } from './scenarios/context.js';
import { runAll, type ScenarioName, scenarioNames, type Targets } from './scenarios/run-all.js';

/** What `--redis-cluster` runs unless told otherwise: the cases whose orders take segment locks. */
const SEGMENTED_SCENARIOS: ScenarioName[] = ['segments', 'business-step', 'cluster'];

/** COMBINE_MAX_BATCH=1: every order is written by its own statement under its own lock hold. */
const COMBINING_OFF = { COMBINE_MAX_BATCH: '1' };

const presets: Record<'full' | 'quick', RunSettings> = {
  full: {
    connections: 64,
    segmentCounts: [1, 2, 4, 8, 16, 20, 32],
    warmupSeconds: 3,
    measureSeconds: 10,
    businessStepMs: 20,
    clusterInstances: 2,
    clusterSegmentCounts: [1, 20],
    memoryConnections: 256,
    quantity: 1,
    timeoutSeconds: 10,
    maxRequestsPerRound: 200_000,
    quietCores: 0.2,
    quietMaxWaitSeconds: 30,
    spreadSkus: 400,
    mixedHotShare: 0.2,
    dashboardWatchers: 20,
    oversellStock: 500,
    growthLedgerRows: [0, 5_000_000],
    growthConnections: 4,
    growthRequests: 4_000,
    disturbedCores: 0.2,
  },
  quick: {
    connections: 64,
    segmentCounts: [1, 20],
    warmupSeconds: 1,
    measureSeconds: 1.5,
    businessStepMs: 20,
    clusterInstances: 2,
    clusterSegmentCounts: [20],
    memoryConnections: 256,
    quantity: 1,
    timeoutSeconds: 10,
    maxRequestsPerRound: 40_000,
    quietCores: 0,
    quietMaxWaitSeconds: 0,
    spreadSkus: 400,
    mixedHotShare: 0.2,
    dashboardWatchers: 20,
    oversellStock: 100,
    growthLedgerRows: [0, 100_000],
    growthConnections: 4,
    growthRequests: 1_000,
    disturbedCores: 0.2,
  },
};

interface CliOptions {
  quick?: boolean;
  url?: string;
  adminToken?: string;
  databaseUrl?: string;
  segments?: number[];
  connections?: number;
  warmup?: number;
  duration?: number;
  businessStep?: number;
  instances?: number;
  scenarios?: ScenarioName[];
  cpuProfDir?: string;
  quietCores?: number;
  redisCluster?: boolean;
  resultsDir: string;
  report: string | boolean;
}

const positiveInt = (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('expected a positive integer');
  return n;
};
const positiveNumber = (value: string) => {
  const n = Number(value);
  if (!(n > 0)) throw new InvalidArgumentError('expected a positive number');
  return n;
};
const intList = (value: string) => value.split(',').map((part) => positiveInt(part.trim()));
const scenarioList = (value: string) =>
  value.split(',').map((part) => {
    const name = part.trim() as ScenarioName;
    if (!scenarioNames.includes(name))
      throw new InvalidArgumentError(`unknown scenario '${part}'; one of ${scenarioNames.join(', ')}`);
    return name;
  });

const program = new Command('loadtest')
  .description('Single lock vs segmented stock on this machine: throughput, latency, lock use, oversell demonstration.')
  .option('--quick', 'short smoke run (under 90 s): segment counts 1 and 20, 1 s warm-up, 1.5 s rounds')
  .option(
    '--url <url>',
    'measure a running service (started by loadtest/bench/bench-main.js for the ceiling and baselines)',
  )
  .option('--admin-token <token>', 'admin token of the --url service')
  .option('--database-url <url>', 'Postgres of the --url service, to audit the books directly (default: API only)')
  .option('--segments <list>', 'segment counts to compare, e.g. 1,2,4,8,16,20,32', intList)
  .option('-c, --connections <n>', 'concurrent connections (default 64)', positiveInt)
  .option('--warmup <seconds>', 'warm-up round length', positiveNumber)
  .option('--duration <seconds>', 'target length of a measured round', positiveNumber)
  .option(
    '--business-step <ms>',
    'simulated business step inside the lock for the second profile (default 20)',
    positiveInt,
  )
  .option('--instances <n>', 'service instances behind one port in the cluster scenario (default 2)', positiveInt)
  .option('--scenarios <list>', `run only these: ${scenarioNames.join(', ')}`, scenarioList)
  .option(
    '--quiet-cores <cores>',
    'before each measured round wait (≤ 20 s) until other processes use at most this many cores; 0 = never (default 0.2, quick 0)',
    Number,
  )
  .option(
    '--redis-cluster',
    'run on a local Redis Cluster (3 primaries, 3 replicas) started by this run; default scenarios: the segmented ones',
  )
  .option('--cpu-prof-dir <dir>', 'write a V8 CPU profile of every service process this run starts into <dir>')
  .option('--results-dir <dir>', 'where the raw results go', 'loadtest/results')
  .option(
    '--report <file>',
    'markdown report to write (default: docs/benchmarks.md for a full local run of every scenario on one Redis, else beside the results)',
  )
  .option('--no-report', 'write the results json only')
  .addHelpText(
    'after',
    '\nWithout --url the run starts its own Redis and Postgres (or uses REDIS_URL / DATABASE_URL) and its own service processes.',
  );

async function main(): Promise<void> {
  program.parse();
  const cli = program.opts<CliOptions>();
  const mode = cli.quick ? 'quick' : 'full';
  const settings: RunSettings = {
    ...presets[mode],
    ...(cli.segments && { segmentCounts: [...new Set(cli.segments)].sort((a, b) => a - b) }),
    ...(cli.connections && { connections: cli.connections }),
    ...(cli.warmup && { warmupSeconds: cli.warmup }),
    ...(cli.duration && { measureSeconds: cli.duration }),
    ...(cli.businessStep && { businessStepMs: cli.businessStep }),
    ...(cli.instances && { clusterInstances: cli.instances }),
    ...(cli.quietCores !== undefined &&
      Number.isFinite(cli.quietCores) && { quietCores: cli.quietCores, quietMaxWaitSeconds: 20 }),
  };
  if (cli.redisCluster && cli.url) program.error('--redis-cluster starts its own services; it cannot measure --url');
  const selected = new Set<ScenarioName>(cli.scenarios ?? (cli.redisCluster ? SEGMENTED_SCENARIOS : scenarioNames));
  const progress = new RunProgress();
  const startedAt = new Date();

  let backing: BackingServices | undefined;
  let db: Db | null = null;
  const running = new Set<ServiceTarget>();
  const stopEverything = async () => {
    await Promise.allSettled([...running].map((s) => s.stop()));
    running.clear();
    await db?.destroy().catch(() => {});
    await backing?.stop();
  };
  let interrupted = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      interrupted = true;
      progress.note(`${signal}: stopping the services this run started`);
      void stopEverything().finally(() => process.exit(130));
    });
  }

  try {
    let targets: Targets;
    if (cli.url) {
      const remote = new RemoteService('target', cli.url.replace(/\/$/, ''), cli.adminToken);
      db = cli.databaseUrl ? createDatabase(cli.databaseUrl, 4) : null;
      progress.note(`target: dashboard ${dashboardUrl(remote)}`);
      targets = {
        start: {
          real: async () => remote,
          realUncombined: null,
          businessStep: null,
          businessStepCombined: null,
          cluster: null,
          alternative: null,
          bareEcho: null,
          realOnRedisCluster: null,
          realUncombinedOnRedisCluster: null,
        },
        redisNodes: null,
        stop: async () => {},
        ownsDatabase: false,
        describe: `the running service at ${remote.url}${db ? ' (books also audited in Postgres)' : ' (books audited through the API only)'}`,
      };
    } else {
      progress.note('starting Redis and Postgres…');
      backing = await startBackingServices(process.env, { redisCluster: cli.redisCluster });
      db = createDatabase(backing.databaseUrl, 4);
      const nodeArgs = cli.cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(cli.cpuProfDir)}`] : [];
      const start = async (description: string, options: Parameters<typeof LocalService.start>[1]) => {
        progress.note(`starting ${description}…`);
        const service = await LocalService.start(backing!, { ...options, nodeArgs });
        running.add(service);
        // Watch a round live: the page lists the run's SKUs (the alternative has no dashboard).
        if (!options.program) progress.note(`${description}: dashboard ${dashboardUrl(service)}`);
        return service;
      };
      const instances = settings.clusterInstances;
      const onRedisCluster = async (description: string, options: Parameters<typeof LocalService.start>[1]) =>
        start(`${description} on a Redis Cluster`, {
          ...options,
          env: { ...options.env, ...(await backing!.redisCluster()).redisEnv },
        });
      targets = {
        start: {
          real: () => start('service (real critical section)', { label: 'real' }),
          realUncombined: () =>
            start('service (real critical section, combining off)', { label: 'real-uncombined', env: COMBINING_OFF }),
          businessStep: () =>
            start(`service (${settings.businessStepMs} ms business step, combining off)`, {
              label: 'business-step',
              env: { CRITICAL_SECTION_DELAY_MS: String(settings.businessStepMs), ...COMBINING_OFF },
            }),
          businessStepCombined: () =>
            start(`service (${settings.businessStepMs} ms business step)`, {
              label: 'business-step-combined',
              env: { CRITICAL_SECTION_DELAY_MS: String(settings.businessStepMs) },
            }),
          cluster: () => start(`${instances} instances behind one port`, { label: 'cluster', instances }),
          alternative: () =>
            start('the alternative (express + pg, one conditional UPDATE)', {
              label: 'alternative',
              program: 'alternative',
            }),
          bareEcho: () => start('a bare express JSON echo', { label: 'bare-echo', program: 'echo' }),
          // A run on a Redis Cluster has no one Redis to compare it with.
          realOnRedisCluster: cli.redisCluster
            ? null
            : () => onRedisCluster('service (real critical section)', { label: 'real-redis-cluster' }),
          realUncombinedOnRedisCluster: cli.redisCluster
            ? null
            : () =>
                onRedisCluster('service (real critical section, combining off)', {
                  label: 'real-uncombined-redis-cluster',
                  env: COMBINING_OFF,
                }),
        },
        redisNodes: async (role) =>
          role === 'realOnRedisCluster' || role === 'realUncombinedOnRedisCluster'
            ? (await backing!.redisCluster()).redisNodes
            : backing!.redisNodes,
        stop: async (service) => {
          running.delete(service);
          await service.stop();
        },
        ownsDatabase: true,
        describe:
          'service processes started by this run: node dist/loadtest/bench/bench-main.js (the service as `npm start` runs it, plus the benchmark routes), LOG_LEVEL=warn, defaults otherwise',
      };
    }

    const ctx = new RunContext(settings, progress, db, backing?.processMarkers ?? null);
    const results = await runAll(ctx, targets, selected);
    const run: RunResults = {
      meta: {
        startedAt: startedAt.toISOString(),
        finishedAt: new Date().toISOString(),
        mode,
        command: ['npm run loadtest', ...(process.argv.length > 2 ? ['--', ...process.argv.slice(2)] : [])].join(' '),
        gitCommit: gitCommit(),
        node: process.version,
        os: `${os.type()} ${os.release()} ${os.arch()}`,
        cpus: { count: os.cpus().length, model: os.cpus()[0]?.model.trim() ?? 'unknown' },
        memoryBytes: os.totalmem(),
        target: targets.describe,
        backing: backing?.description ?? 'the target’s own',
        settings,
      },
      ...results,
    };
    await stopEverything();

    const stamp = startedAt.toISOString().replace(/[:.]/g, '-');
    const resultsDir = path.resolve(cli.resultsDir);
    mkdirSync(resultsDir, { recursive: true });
    const resultsFile = path.join(resultsDir, `${stamp}.json`);
    writeFileSync(resultsFile, `${JSON.stringify(run, null, 2)}\n`);
    progress.note(`results: ${path.relative(process.cwd(), resultsFile)}`);

    if (cli.report !== false) {
      const defaultReport =
        // docs/benchmarks.md is the report of a whole local run on one Redis; any other run's goes beside its results.
        mode === 'full' && !cli.url && !cli.redisCluster && !cli.scenarios
          ? 'docs/benchmarks.md'
          : path.join(cli.resultsDir, `${stamp}.md`);
      const reportFile = path.resolve(typeof cli.report === 'string' ? cli.report : defaultReport);
      await writeReport(run, reportFile, path.relative(path.dirname(reportFile), resultsFile));
      progress.note(`report: ${path.relative(process.cwd(), reportFile)}`);
    }

    const failures = bookFailures(run);
    for (const failure of failures) progress.note(`INVARIANT FAILED: ${failure}`);
    process.exitCode = failures.length > 0 ? 1 : 0;
  } catch (error) {
    if (!interrupted) {
      for (const service of running) progress.note(service.diagnostics());
      await stopEverything();
      throw error;
    }
  }
}

/** Locked cases whose books do not add up, and unguarded demonstrations that failed to show the oversell. */
function bookFailures(run: RunResults): string[] {
  const failures: string[] = [];
  for (const c of [
    ...run.segments,
    ...run.cluster,
    ...run.lockFree,
    ...run.alternative,
    ...(run.spread ?? []),
    ...run.memory,
  ]) {
    for (const [books, round] of [
      [c.books, 'measured'],
      [c.warmupBooks, 'warm-up'],
    ] as const) {
      for (const check of books.checks.filter((k) => !k.ok))
        failures.push(`${c.label} (${round}): ${check.name}: ${check.detail}`);
    }
  }
  for (const c of run.growth) if (!c.booksOk) failures.push(`${c.label}: the books do not add up after its rounds`);
  for (const c of run.oversell) {
    if (expectedSafe(c) && !c.books.ok)
      failures.push(
        `${c.label}: ${c.books.checks
          .filter((k) => !k.ok)
          .map((k) => `${k.name}: ${k.detail}`)
          .join('; ')}`,
      );
  }
  return failures;
}

/** The commit measured; marked when the service's sources differ from it (the build used the working tree). */
function gitCommit(): string {
  const git = (...args: string[]) =>
    execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  try {
    const head = git('rev-parse', '--short', 'HEAD');
    return git('status', '--porcelain', '--', 'src', 'migrations') ? `${head} + uncommitted changes in src/` : head;
  } catch {
    return 'unknown';
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? (error.stack ?? error.message) : error);
  process.exit(1);
});

/** The service's dashboard, with its token in the fragment (which the browser never sends) when it has one. */
function dashboardUrl(service: { url: string; adminToken: string | undefined }): string {
  return `${service.url}/dashboard${service.adminToken ? `#token=${encodeURIComponent(service.adminToken)}` : ''}`;
}
