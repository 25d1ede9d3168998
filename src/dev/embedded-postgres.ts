import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from '../logger.js';
import type { EmbeddedServer } from './embedded-redis.js';
import { freePort } from './free-port.js';
import { stopOrphanedServer } from './leftover-process.js';
import { loadEmbeddedPostgres } from './load-embedded-postgres.js';

const DATABASE = 'stock';
const USER = 'stock';
// Loopback only, private data directory: the password guards nothing that the file system does not already.
const PASSWORD = 'stock';

/** Postgres from the embedded-postgres package under `<dataDir>/postgres`; data survives restarts. */
export async function startEmbeddedPostgres(dataDir: string, log: Logger): Promise<EmbeddedServer> {
  const databaseDir = path.join(dataDir, 'postgres');
  const port = await freePort();
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: USER,
    password: PASSWORD,
    persistent: true,
    // Postgres refuses to run as root; as root, the package runs it as a `postgres` user it creates if needed.
    createPostgresUser: true,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300'],
    onLog: (message) => log.debug({ postgres: String(message).trim() }),
    onError: (error) => log.error({ postgres: String(error).trim() }),
  });
  if (existsSync(path.join(databaseDir, 'PG_VERSION'))) {
    await stopOrphanedServer(path.join(databaseDir, 'postmaster.pid'), 'postgres');
  } else {
    await server.initialise();
  }
  await server.start();
  try {
    await server.createDatabase(DATABASE);
  } catch (error) {
    // 42P04: the database exists, as it does on every start after the first.
    if ((error as { code?: string }).code !== '42P04') throw error;
  }
  log.info({ port, databaseDir }, 'embedded postgres started');
  return {
    url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${DATABASE}`,
    stop: () => server.stop(),
  };
}
