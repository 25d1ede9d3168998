import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { recordHistory, stockWriters } from '../support/lock-safety.js';
import { testEndpoints } from '../support/service.js';

// A service whose fencing was forgotten: every writer of stock_segments built without its guard, to prove that the
// checker (lock-safety.test.ts) notices on each. Everything else is the statements the service runs.
vi.mock('../../src/inventory/fence-guard.js', () => ({ FENCE_GUARD: 'true', FENCE_GUARD_SINCE_READ: 'true' }));

const SECTIONS = 2_000;

describe('lock-safety checker without the fence guard: the checker can fail', () => {
  let db: Db;
  beforeAll(() => {
    db = createDatabase(testEndpoints().databaseUrl, 18);
  });
  afterAll(() => db.destroy());

  it.each(stockWriters)(
    '$name: finds writes a newer holder overtook',
    async (writer) => {
      const run = await recordHistory(db, writer, SECTIONS);
      console.log(`[checker] ${writer.name}, no guard: ${JSON.stringify(run.summary)}`);
      expect(run.summary.sections).toBe(SECTIONS);
      expect(run.found.count).toBeGreaterThan(0);
      // What it flags for the order batch is real damage: units handed out twice.
      if (writer.stores === 'what it read') expect(run.summary.lostUpdates).toBeGreaterThan(0);
    },
    600_000,
  );
});
