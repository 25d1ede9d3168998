import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../support/wait-for.js';

// `npm start` builds first: on a shared 2-core machine the build alone can take a minute.
const STARTED_WITHIN_MS = 150_000;
const STOPPED_WITHIN_MS = 30_000;

/** Every live process id with its parent's, from /proc. */
function parentsByPid(): Map<number, number> {
  const parents = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Field 4, counted after the parenthesised command name (which may contain spaces).
      parents.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // Gone meanwhile.
    }
  }
  return parents;
}

/** The processes below `root`, with their command lines. */
function descendants(root: number): Map<number, string> {
  const parents = parentsByPid();
  const found = new Map<number, string>();
  let frontier = [root];
  while (frontier.length > 0) {
    const next: number[] = [];
    for (const [pid, parent] of parents) if (frontier.includes(parent) && !found.has(pid)) next.push(pid);
    for (const pid of next) found.set(pid, commandLine(pid) ?? '');
    frontier = next;
  }
  return found;
}

function commandLine(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
  } catch {
    return undefined;
  }
}

/** Whether anything accepts connections on the loopback port. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** The environment of a user who configured nothing: the embedded default, under a data directory of the test's. */
function freshEnvironment(dataDir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' };
  for (const name of Object.keys(env)) {
    if (/^(REDIS_|DATABASE_URL|ADMIN_TOKEN|METRICS_TOKEN|API_KEYS_FILE|CUSTOMER_)/.test(name)) delete env[name];
  }
  return env;
}

describe('npm start', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(
      `stops with its Redis and Postgres on ${signal} sent to the npm process alone`,
      async () => {
        const scratch = mkdtempSync(path.join(tmpdir(), 'npm-start-'));
        // Run as root, the embedded Postgres runs as its own user, which must reach its data directory.
        chmodSync(scratch, 0o755);
        const npm = spawn('npm', ['start'], {
          env: freshEnvironment(path.join(scratch, 'data')),
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        const output: string[] = [];
        for (const stream of [npm.stdout, npm.stderr])
          createInterface({ input: stream }).on('line', (l) => output.push(l));
        const exited = once(npm, 'exit');
        let service = new Map<number, string>();
        try {
          const portOf = (message: string, field: 'port' | 'url') => {
            const line = output.find((l) => l.includes(`"msg":"${message}"`));
            const value = line ? (JSON.parse(line) as Record<string, unknown>)[field] : undefined;
            return value === undefined
              ? undefined
              : Number(new URL(String(field === 'url' ? value : `x://h:${value}`)).port);
          };
          const ready = await waitFor(() => portOf('listening', 'url') !== undefined, STARTED_WITHIN_MS, 250);
          expect(ready, output.join('\n')).toBeLessThan(Infinity);
          const ports = [
            portOf('listening', 'url')!,
            portOf('embedded redis-server started', 'port')!,
            portOf('embedded postgres started', 'port')!,
          ];
          for (const port of ports) expect(await listening(port)).toBe(true);
          service = descendants(npm.pid!);
          const commands = [...service.values()].join('\n');
          expect(commands).toMatch(/node .*dist\/src\/main\.js/);
          expect(commands).toMatch(/redis-server/);
          expect(commands).toMatch(/postgres -D/);

          process.kill(npm.pid!, signal);
          const stopped = await waitFor(() => npm.exitCode !== null || npm.signalCode !== null, STOPPED_WITHIN_MS, 100);
          expect(stopped, output.join('\n')).toBeLessThan(Infinity);
          expect(output.join('\n')).toContain('"msg":"stopped"');
          // No process that ran below npm is left: the same pid with the same command line would be one of them.
          const left = [...service].filter(([pid, command]) => commandLine(pid) === command);
          expect(left).toEqual([]);
          for (const port of ports) expect(await listening(port)).toBe(false);
        } finally {
          // Should the test fail half-way, nothing it started outlives it.
          for (const [pid, command] of [...service, ...descendants(npm.pid!)]) {
            if (commandLine(pid) === command) process.kill(pid, 'SIGKILL');
          }
          if (npm.exitCode === null && npm.signalCode === null) npm.kill('SIGKILL');
          await exited;
          rmSync(scratch, { recursive: true, force: true });
        }
      },
      STARTED_WITHIN_MS + STOPPED_WITHIN_MS + 30_000,
    );
  }
});
