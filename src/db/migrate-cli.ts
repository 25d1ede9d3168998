import { loadConfig } from '../config.js';
import { resolveDatabase } from '../endpoints.js';
import { createLogger } from '../logger.js';
import { createDatabase } from './database.js';
import { migrateToLatest } from './migrator.js';

/** `npm run migrate`: applies pending migrations to DATABASE_URL (or the embedded database) and exits. */
const config = loadConfig();
const log = createLogger(config.logLevel);
const endpoints = await resolveDatabase(config, log);
const db = createDatabase(endpoints.databaseUrl, 1);
try {
  await migrateToLatest(db, log);
  log.info('database is up to date');
} catch (error) {
  log.error({ err: error }, 'migration failed');
  process.exitCode = 1;
} finally {
  await db.destroy();
  await endpoints.stopEmbedded();
}
