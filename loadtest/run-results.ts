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
    backing: ctx.backing.description(),
    settings: ctx.settings,
  };
}

/** The commit measured, `-dirty` when the working tree differs from it (the build used the working tree). */
function gitCommit(): string {
  try {
    const describe = ['describe', '--always', '--dirty', '--exclude=*'];
    return execFileSync('git', describe, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return 'unknown';
  }
}
