import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { FileMigrationProvider, type Kysely, Migrator } from 'kysely';
import type { Logger } from '../logger.js';

// Compiled layout: dist/src/db/migrator.js → dist/migrations/.
const compiledMigrations = fileURLToPath(new URL('../../migrations/', import.meta.url));

/**
 * Applies pending migrations. Kysely's Migrator takes a Postgres advisory lock, so instances that start together
 * apply each migration exactly once.
 */
export async function migrateToLatest(
  db: Kysely<any>,
  log: Logger,
  migrationFolder = compiledMigrations,
): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: new FileMigrationProvider({ fs, path, migrationFolder }),
  });
  const { error, results } = await migrator.migrateToLatest();
  for (const result of results ?? []) {
    if (result.status === 'Success') log.info({ migration: result.migrationName }, 'migration applied');
    else if (result.status === 'Error') log.error({ migration: result.migrationName }, 'migration failed');
  }
  if (error) throw error instanceof Error ? error : new Error(String(error));
}
