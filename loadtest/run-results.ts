/** What a run's results file holds: the cases it measured, and the machine, commit and settings it measured them on. */
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import type { RunContext } from './scenarios/context.js';
import type { RunCases } from './scenarios/plan.js';

export type RunResults = { meta: ReturnType<typeof describeRun> } & RunCases;

// The report's "Machine and method".
export function describeRun(mode: 'quick' | 'full', startedAt: Date, ctx: RunContext) {
  return {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    mode,
    command: ['npm run loadtest', ...(process.argv.length > 2 ? ['--', ...process.argv.slice(2)] : [])].join(' '),
    gitCommit: gitCommit(),
    node: process.version,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    cpus: { count: os.cpus().length, model: os.cpus()[0]?.model.trim() ?? 'unknown' },
    memoryBytes: os.totalmem(),
    target:
      'service processes started by this run: node dist/loadtest/bench/bench-main.js (the service as `npm start` runs it, plus the benchmark routes), LOG_LEVEL=warn, defaults otherwise',
    backing: ctx.backing.description(),
    settings: ctx.settings,
  };
}

/** The commit measured, marked when the service's sources differ from it (the build used the working tree). */
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
