import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { recordHistory, stockWriters } from '../support/lock-safety.js';
import { testEndpoints } from '../support/service.js';

/** Sections of the order batch, the path every sale takes; the other writers run fewer. */
const ORDER_SECTIONS = 10_000;
const OTHER_SECTIONS = 2_000;

describe('lock-safety checker: every writer of stock_segments, under pauses past the lease', () => {
  let db: Db;
  beforeAll(() => {
    db = createDatabase(testEndpoints().databaseUrl, 18);
  });
  afterAll(() => db.destroy());

  it.each(stockWriters)(
    '$name: no write a newer holder could have overtaken takes effect',
    async (writer) => {
      const sections = writer.stores === 'what it read' ? ORDER_SECTIONS : OTHER_SECTIONS;
      const run = await recordHistory(db, writer, sections);
      console.log(`[checker] ${writer.name}, guarded: ${JSON.stringify(run.summary)}`);
      expect(run.summary.sections).toBe(sections);
      expect(run.summary.pausedPastLease).toBeGreaterThan(0);
      expect(run.summary.retaken).toBeGreaterThan(0);
      expect(run.summary.effective).toBeGreaterThan(0);
      expect(run.found.examples).toEqual([]);
      if (writer.stores === 'what it read') expect(run.summary.lostUpdates).toBe(0);
    },
    600_000,
  );
});
