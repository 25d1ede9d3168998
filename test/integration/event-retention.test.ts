import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/database.js';
import { EventRetention } from '../../src/events/retention.js';
import { createLogger } from '../../src/logger.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';

const HOUR = 3_600_000;

/** Retention on a database of its own (no sequencer writing beside it), with events written straight into the feed. */
describe('event retention', () => {
  let own: OwnDatabase;
  let db: Db;

  beforeAll(async () => {
    own = await createOwnDatabase('retention');
    db = own.db;
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
  });
  afterAll(() => own?.drop());

  /** Events at positions `from`..`to`, all `ageMs` old. */
  const write = (from: number, to: number, ageMs: number) =>
    sql`
    insert into events (position, sku_id, sku, type, sequence, occurred_at, data)
    select p, 1, 'kept', 'order.placed', p, now() - ${ageMs} * interval '1 millisecond', '{}'::jsonb
      from generate_series(${from}::bigint, ${to}::bigint) p`.execute(db);
  const positions = async () =>
    (await sql<{ position: string }>`select position from events order by position`.execute(db)).rows.map((r) =>
      Number(r.position),
    );

  it('deletes expired events oldest first, a statement at a time, until one meets an event inside the retention', async () => {
    const retention = new EventRetention(db, HOUR, createLogger('silent'));
    // 1,500 expired events, one inside the retention, then 899 expired ones sequenced after it (behind a long
    // transaction, say), then 100 inside it. Statements take 1,000 positions: the second meets the young event and
    // is the last, so the expired events past it wait for the next sweep.
    await write(1, 1_500, 2 * HOUR);
    await write(1_501, 1_501, 0);
    await write(1_502, 2_400, 2 * HOUR);
    await write(2_401, 2_500, 0);

    expect(await retention.sweep()).toBe(1_999);
    const left = await positions();
    expect(left.slice(0, 2)).toEqual([1_501, 2_001]);
    expect(left).toHaveLength(501);

    // Once the event that stopped it expires too, the next sweep takes everything expired, and nothing inside.
    await sql`update events set occurred_at = now() - interval '2 hours' where position = 1501`.execute(db);
    expect(await retention.sweep()).toBe(401);
    expect(await positions()).toEqual(Array.from({ length: 100 }, (_, i) => 2_401 + i));
    expect(await retention.sweep()).toBe(0);
  });
});
