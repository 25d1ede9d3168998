import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
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

/** Which of `pids` hold an established connection on the loopback `port`, from /proc (each socket's inode). */
function connectionHolders(port: number, pids: number[]): Set<number> {
  const established = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const row of readFileSync(table, 'utf8').trim().split('\n').slice(1)) {
      const fields = row.trim().split(/\s+/);
      const localPort = parseInt(fields[1]!.split(':')[1]!, 16);
      if (localPort === port && fields[3] === '01') established.add(fields[9]!);
    }
  }
  const holders = new Set<number>();
  for (const pid of pids) {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      const inode = /^socket:\[(\d+)\]$/.exec(readlinkOrEmpty(`/proc/${pid}/fd/${fd}`))?.[1];
      if (inode && established.has(inode)) holders.add(pid);
    }
  }
  return holders;
}

function readlinkOrEmpty(file: string): string {
  try {
    return readlinkSync(file);
  } catch {
    return '';
  }
}

/** `count` connections to the loopback `port`, each kept open once it has had its answer to GET /readyz. */
async function answeredConnections(port: number, count: number): Promise<{ statuses: string[]; close(): void }> {
  const sockets = Array.from({ length: count }, () => connect(port, '127.0.0.1'));
  const statuses = await Promise.all(
    sockets.map(async (socket) => {
      await once(socket, 'connect');
      socket.write('GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n');
      const [chunk] = (await once(socket, 'data')) as [Buffer];
      return chunk.toString('latin1').split('\r\n')[0]!;
    }),
  );
  return { statuses, close: () => sockets.forEach((socket) => socket.destroy()) };
}

/** The environment of a user who configured nothing: the embedded default, under a data directory of the test's. */
function freshEnvironment(dataDir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' };
  for (const name of Object.keys(env)) {
    if (/^(REDIS_|DATABASE_URL|ADMIN_TOKEN|METRICS_TOKEN|API_KEYS_FILE|CUSTOMER_|WORKERS)/.test(name)) delete env[name];
  }
  return env;
}

// With the embedded Redis and Postgres on this machine, the default leaves a core to each of them.
const DEFAULT_WORKERS = Math.max(1, availableParallelism() - 2);

describe('npm start', () => {
  const cases = [
    { signal: 'SIGTERM', workers: undefined },
    { signal: 'SIGINT', workers: undefined },
    { signal: 'SIGTERM', workers: 2 },
  ] as const;
  for (const { signal, workers } of cases) {
    const name = workers
      ? `runs ${workers} workers on one port, and all stop with its Redis and Postgres on ${signal} to npm alone`
      : `stops with its Redis and Postgres on ${signal} sent to the npm process alone`;
    it(
      name,
      async () => {
        const scratch = mkdtempSync(path.join(tmpdir(), 'npm-start-'));
        // Run as root, the embedded Postgres runs as its own user, which must reach its data directory.
        chmodSync(scratch, 0o755);
        const npm = spawn('npm', ['start'], {
          env: { ...freshEnvironment(path.join(scratch, 'data')), ...(workers && { WORKERS: String(workers) }) },
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
          const listeningLine = workers ? `listening: ${workers} workers` : 'listening';
          const ready = await waitFor(() => portOf(listeningLine, 'url') !== undefined, STARTED_WITHIN_MS, 250);
          expect(ready, output.join('\n')).toBeLessThan(Infinity);
          // The start says how many workers it runs and why.
          const chosen = workers ?? DEFAULT_WORKERS;
          expect(output.join('\n')).toContain(`"msg":"workers: ${chosen}"`);
          const ports = [
            portOf(listeningLine, 'url')!,
            portOf('embedded redis-server started', 'port')!,
            portOf('embedded postgres started', 'port')!,
          ];
          for (const port of ports) expect(await listening(port)).toBe(true);
          service = descendants(npm.pid!);
          const commands = [...service.values()].join('\n');
          expect(commands).toMatch(/node .*dist\/src\/main\.js/);
          expect(commands).toMatch(/redis-server/);
          expect(commands).toMatch(/postgres -D/);
          const instances = [...service].filter(([, command]) => /node .*dist\/src\/main\.js/.test(command));
          // The primary and its workers, or the lone instance.
          expect(instances).toHaveLength(workers ? workers + 1 : 1);
          if (workers) {
            // Connections to the one port are dealt out among the workers (round robin): every worker answers.
            const connections = await answeredConnections(ports[0]!, 4 * workers);
            const holders = connectionHolders(
              ports[0]!,
              instances.map(([pid]) => pid),
            );
            connections.close();
            expect(new Set(connections.statuses)).toEqual(new Set(['HTTP/1.1 200 OK']));
            expect(holders.size).toBe(workers);
          }

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
