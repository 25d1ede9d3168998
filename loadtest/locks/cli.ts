import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { RedisServer } from '../../src/dev/servers/index.js';
import type { LockBackendKind } from '../../src/lock/distributed-lock.js';
import { BackendStores, backendKinds } from './backend-stores.js';
import { type Contender, type ContenderName, contenderNames, createContender } from './contenders.js';
import { type OrderFlowResult, orderFlowReport, runOrderFlow } from './order-flow.js';
import { checkTargets, markdownReport } from './report.js';
import { type CellResult, runCell } from './run-cell.js';

const list = (value: string) =>
  value
    .split(',')
    .map((v) => v.trim())
    .filter(Boolean);
const numbers = (value: string) => list(value).map(Number);

const program = new Command()
  .name('loadtest:locks')
  .description('This lock against redlock (v5) and redis-semaphore (Mutex), on one Redis, in one run.')
  .option('--redis-url <url>', 'a loopback Redis to use (default: a private redis-server started for the run)')
  .option('--workers <n>', 'concurrent workers', '50')
  .option('--keys <list>', 'numbers of keys K', '1,20')
  .option('--holds <list>', 'hold times H in ms', '0,20')
  .option('--locks <list>', `contenders (${contenderNames.join(', ')})`, contenderNames.join(','))
  .option(
    '--backends <list>',
    `compare this lock's backends instead (${backendKinds.join(', ')}), each on private stores`,
  )
  .option(
    '--order-flow',
    "with --backends: run the service's order flow on each backend (clients = --workers, hold = --holds)",
  )
  .option('--segments <n>', 'segments of the SKU in --order-flow', '20')
  .option('--lock-wait-ms <ms>', 'LOCK_WAIT_MS of the service in --order-flow', '10000')
  .option('--dead-lock-node', 'with --order-flow and redlock: run redlock again with one of its three nodes killed')
  .option('--duration <s>', 'measured seconds per cell', '6')
  .option('--warmup <s>', 'unmeasured seconds before each cell', '1')
  .option('--out <dir>', 'where the JSON and Markdown results go', 'loadtest/locks/results')
  .parse();

const opts = program.opts<{
  redisUrl?: string;
  workers: string;
  keys: string;
  holds: string;
  locks: string;
  backends?: string;
  orderFlow?: boolean;
  segments: string;
  lockWaitMs: string;
  deadLockNode?: boolean;
  duration: string;
  warmup: string;
  out: string;
}>();

const url = opts.redisUrl ?? '';
if (url && !/^redis:\/\/(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?(\/\d+)?$/.test(url)) {
  console.error('--redis-url must point at a loopback address');
  process.exit(1);
}
const locks = list(opts.locks) as ContenderName[];
for (const name of locks) {
  if (!contenderNames.includes(name)) {
    console.error(`unknown lock '${name}' (choose from ${contenderNames.join(', ')})`);
    process.exit(1);
  }
}

const backends = opts.backends ? (list(opts.backends) as LockBackendKind[]) : undefined;
for (const kind of backends ?? []) {
  if (!backendKinds.includes(kind)) {
    console.error(`unknown backend '${kind}' (choose from ${backendKinds.join(', ')})`);
    process.exit(1);
  }
}

// The run's own, without persistence: nothing it writes is worth keeping.
const server = url ? undefined : await RedisServer.start();
const redisUrl = url || server!.url;
const runId = Date.now().toString(36);
if (opts.orderFlow && !backends) {
  console.error('--order-flow needs --backends');
  process.exit(1);
}
const stores = backends ? await BackendStores.start(backends, redisUrl, opts.orderFlow) : undefined;
if (opts.orderFlow) await runOrderFlowComparison(stores!, backends!);
const contenders: { name: string; create: () => Contender }[] = backends
  ? backends.map((kind) => ({ name: `backend:${kind}`, create: () => stores!.contender(kind, runId) }))
  : locks.map((name) => ({ name, create: () => createContender(name, redisUrl, runId) }));
const workers = Number(opts.workers);
const results: CellResult[] = [];
try {
  for (const keys of numbers(opts.keys)) {
    for (const holdMs of numbers(opts.holds)) {
      for (const { name, create } of contenders) {
        const contender = create();
        const result = await runCell(contender, {
          workers,
          keys,
          holdMs,
          warmupMs: Number(opts.warmup) * 1000,
          durationMs: Number(opts.duration) * 1000,
        });
        await contender.close();
        results.push(result);
        console.log(
          `K=${keys} H=${holdMs}ms ${name.padEnd(16)} ${result.sectionsPerSecond.toFixed(0).padStart(6)}/s  max wait ${result.maxWaitMs.toFixed(0)} ms  p99 ${result.p99WaitMs.toFixed(0)} ms  errors ${result.errors}`,
        );
      }
    }
  }
} finally {
  await stores?.stop();
  await server?.destroy();
}

const checks = backends ? [] : checkTargets(results, workers);
const context = `${new Date().toISOString()} · Node ${process.version} · ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'} · ${workers} workers · ${opts.duration} s measured per cell after ${opts.warmup} s warm-up · one Redis, one process`;
const report = markdownReport(results, checks, context);
mkdirSync(opts.out, { recursive: true });
const stamp = new Date().toISOString().replace(/[:.]/g, '-');
const prefix = backends ? 'backends' : 'locks';
writeFileSync(path.join(opts.out, `${prefix}-${stamp}.json`), JSON.stringify({ context, results, checks }, null, 2));
writeFileSync(path.join(opts.out, `${prefix}-${stamp}.md`), `${report}\n`);
console.log(`\n${report}`);
process.exit(0);

/** --order-flow: the service's order flow on each backend, then exit. */
async function runOrderFlowComparison(stores: BackendStores, kinds: LockBackendKind[]): Promise<never> {
  const results: OrderFlowResult[] = [];
  try {
    for (const holdMs of numbers(opts.holds)) {
      const runs: { backend: LockBackendKind; deadNode?: boolean }[] = kinds.map((backend) => ({ backend }));
      if (opts.deadLockNode && kinds.includes('redlock')) runs.push({ backend: 'redlock', deadNode: true });
      for (const { backend, deadNode } of runs) {
        if (deadNode) await stores.lockNodes[0]!.stop();
        const result = await runOrderFlow(stores, {
          backend,
          variant: deadNode ? 'one node of three killed' : undefined,
          clients: Number(opts.workers),
          segments: Number(opts.segments),
          holdMs,
          lockWaitMs: Number(opts.lockWaitMs),
          warmupMs: Number(opts.warmup) * 1000,
          durationMs: Number(opts.duration) * 1000,
        });
        if (deadNode) await stores.lockNodes[0]!.resume();
        results.push(result);
        console.log(
          `order flow, H=${holdMs}ms ${backend.padEnd(10)}${deadNode ? ' (a node dead)' : ''} ${result.ordersPerSecond.toFixed(0).padStart(6)} orders/s  p99 ${result.p99LatencyMs.toFixed(0)} ms  not placed ${result.refused}`,
        );
      }
    }
  } finally {
    await stores.stop();
    await server?.destroy();
  }
  const context = `${new Date().toISOString()} · Node ${process.version} · ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'} · ${opts.workers} clients · LOCK_WAIT_MS ${opts.lockWaitMs} · ${opts.duration} s measured after ${opts.warmup} s warm-up · service in the load generator's process`;
  const report = orderFlowReport(results, context);
  mkdirSync(opts.out, { recursive: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  writeFileSync(path.join(opts.out, `order-flow-${stamp}.json`), JSON.stringify({ context, results }, null, 2));
  writeFileSync(path.join(opts.out, `order-flow-${stamp}.md`), `${report}\n`);
  console.log(`\n${report}`);
  process.exit(0);
}
