import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from '../logger.js';
import { freePort } from './free-port.js';
import { stopOrphanedServer } from './leftover-process.js';

export class MissingDependencyError extends Error {}

export interface EmbeddedServer {
  url: string;
  stop(): Promise<void>;
}

const HOW_TO_GET_REDIS = [
  'redis-server was not found on PATH. Either install it:',
  '  Debian/Ubuntu: sudo apt-get install -y redis-server',
  '  macOS:         brew install redis',
  'or run one and point the service at it:',
  '  docker compose up -d redis && REDIS_URL=redis://127.0.0.1:6379 npm start',
].join('\n');

/**
 * A private redis-server under `<dataDir>/redis`, append-only file on, reachable on loopback only. It stops with
 * the service; one left behind by a killed service is stopped before a new one takes its files.
 */
export async function startEmbeddedRedis(dataDir: string, log: Logger): Promise<EmbeddedServer> {
  if (spawnSync('redis-server', ['--version']).error) throw new MissingDependencyError(HOW_TO_GET_REDIS);
  const dir = path.join(dataDir, 'redis');
  mkdirSync(dir, { recursive: true });
  const pidFile = path.join(dir, 'redis.pid');
  await stopOrphanedServer(pidFile, 'redis-server');

  const port = await freePort();
  const child = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--appendonly',
      'yes',
      '--pidfile',
      pidFile,
      '--logfile',
      '',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const stopOnExit = () => child.kill('SIGTERM');
  process.on('exit', stopOnExit);

  await new Promise<void>((resolve, reject) => {
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('Ready to accept connections')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`redis-server exited with code ${code}:\n${output.slice(-2000)}`)));
  });
  log.info({ port, dir }, 'embedded redis-server started');

  return {
    url: `redis://127.0.0.1:${port}`,
    async stop() {
      process.off('exit', stopOnExit);
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    },
  };
}
